//! Builds each agent's and each role's reasoner from the team file (and `--reasoner`,
//! `--base-url`, `--model`: [`Overrides`]), with the run's shared usage ledger and
//! conversations. Every setting is checked here, before any agent runs: a missing key variable,
//! a bad base URL, an unknown local model, a missing or damaged model file are errors that name
//! the setting and say how to fix it; so is a task with goal steps (or only a goal) for a
//! reasoner that does not plan ([`check_planning`]).
//!
//! An `openai` reasoner finds its server and key as the official OpenAI clients do: the base URL
//! is `--base-url`, else the team file's `base_url`, else `$OPENAI_BASE_URL` (as it was when the
//! run started), else <https://api.openai.com/v1>; the key is read from the variable the team
//! file's `api_key_env` names, else from `OPENAI_API_KEY` when the server is one the user named
//! (`--base-url`, `$OPENAI_BASE_URL`) or OpenAI's own. A team file is input that may come from
//! someone else: a server only its `base_url` names gets no key unless the file names the
//! variable with `api_key_env` (which must then be set). Otherwise a server on loopback (`localhost`,
//! 127.0.0.0/8, `::1`) needs no key: without one, no `Authorization` header is sent; any other
//! server without a key is refused before the run.

use std::collections::BTreeMap;
use std::sync::Arc;

use agent_core::tools::ToolRegistry;
use agent_core::{Reasoner, RuleBasedReasoner};
use agent_layers::BottomSpec;
use agent_llm::{
    AnthropicConfig, AnthropicProvider, Conversations, LlmReasoner, LlmSettings, LlmStore,
    OpenAiConfig, OpenAiProvider, Provider, SledLlmStore, UsageLedger,
};
use agent_pool::{RoleSpec, TeamShape};
use agent_state::{AgentId, AgentLayer, StepTarget, Task};
use run_store::RunStore;
use team_file::{ReasonerKind, ReasonerSettings, TeamFile};
use whiteboard::Whiteboard;

/// Each agent's reasoner and, if any agent uses a model, the run's ledger.
pub struct Reasoning {
    /// For agents without their own.
    pub default: Arc<dyn Reasoner>,
    /// Per agent.
    pub per_agent: BTreeMap<AgentId, Arc<dyn Reasoner>>,
    /// Per role (for the agents spawned while the team works), for the roles with settings of
    /// their own; the others use `default`.
    pub per_role: BTreeMap<String, Arc<dyn Reasoner>>,
    /// The usage ledger, when at least one agent reasons with a model.
    pub ledger: Option<Arc<UsageLedger>>,
}

/// A setting that cannot be used; its message names the setting and the fix.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SettingError(pub String);

/// Why the settings check before a run failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A setting is wrong (bad input).
    #[error(transparent)]
    Setting(#[from] SettingError),
    /// A server could not be asked now (down, timing out, answering 5xx or 429): nothing is
    /// wrong with the settings; try again later.
    #[error("reasoner check before the run: {0}; nothing was started, try again when it answers")]
    Unavailable(agent_llm::ProviderError),
}

/// What the command line sets of every agent's and role's reasoner, over the team file's
/// settings, and the environment's default server.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--reasoner`: the kind.
    pub kind: Option<ReasonerKind>,
    /// `--base-url`: the server's API root.
    pub base_url: Option<String>,
    /// `--model`: the model (over the agents' and roles' own `model` too).
    pub model: Option<String>,
    /// `$OPENAI_BASE_URL` (as it was when the run started): the API root of the `openai`
    /// reasoners that have none of their own.
    pub openai_base_url: Option<String>,
    /// `--small-model`: every model server's agent gets the small model's narrow tool loop.
    pub small_model: bool,
}

/// The API root of OpenAI's own API, the `openai` reasoners' last default.
pub const OPENAI_API: &str = "https://api.openai.com/v1";

/// The variable the official OpenAI clients read the base URL from.
pub const OPENAI_BASE_URL_VAR: &str = "OPENAI_BASE_URL";

/// Whether `url` (an http(s) URL) names a server on this machine: `localhost`, an address of
/// 127.0.0.0/8 or `::1`. Anything else, or anything that does not parse, is not.
pub fn is_loopback(url: &str) -> bool {
    let Some((host, _)) = crate::url::url_host(url) else { return false };
    let host = host.strip_suffix('.').unwrap_or(host);
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Providers are shared by every agent with the same settings (one embedded model per run).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct ProviderKey {
    kind: &'static str,
    base_url: Option<String>,
    model: String,
    api_key_env: Option<String>,
    timeout_ms: Option<u128>,
    structured_output: agent_llm::StructuredOutput,
    /// A small model: asked on `/completions` (see `OpenAiConfig::completions`).
    small_model: bool,
}

/// Builds the reasoners for `team`'s agents and roles, with `overrides` (from `--reasoner`,
/// `--base-url` and `--model`) over every agent's and role's settings. The usage ledger and
/// the conversations are kept in `store` (a run's), or in memory without one (a task team of
/// an evolution's evaluation).
pub async fn build(
    team: &TeamFile,
    overrides: &Overrides,
    store: Option<&RunStore>,
    boards: Arc<dyn Whiteboard>,
    tools: &ToolRegistry,
    events: &agent_core::EventHub,
) -> Result<Reasoning, SettingError> {
    let settings_of = |id: Option<&AgentId>| -> ReasonerSettings {
        let s = id.and_then(|id| team.agent_reasoners.get(id)).unwrap_or(&team.default_reasoner);
        overridden(s, overrides)
    };
    let role_settings_of = |role: &str| role_settings(team, role, overrides);
    let uses_model = |s: &ReasonerSettings| s.kind != ReasonerKind::RuleBased;
    let any_model = uses_model(&settings_of(None))
        || team.spec.agents.iter().any(|a| uses_model(&settings_of(Some(&a.config.id))))
        || team.spec.roles.roles().any(|r| uses_model(&role_settings_of(&r.name)));
    let mut shared: Option<Shared> = None;
    if any_model {
        let (ledger, conversations) = ledger_and_conversations(team, store)?;
        let known = ledger.report().structured_output;
        let agent_tools = Arc::new(
            team.spec
                .agents
                .iter()
                .filter_map(|a| match &a.role {
                    RoleSpec::Bottom(BottomSpec { tools, .. }) => {
                        Some((a.config.id.clone(), tools.clone()))
                    }
                    _ => None,
                })
                .collect(),
        );
        shared = Some(Shared {
            ledger: Arc::new(ledger),
            conversations: Arc::new(conversations),
            boards,
            tools: tools.clone(),
            agent_tools,
            events: events.clone(),
            providers: ProviderSet::new(known, overrides, false),
        });
    }
    let default = make(&mut shared, &settings_of(None), None).await?;
    let mut per_agent = BTreeMap::new();
    for agent in &team.spec.agents {
        let id = &agent.config.id;
        let own_model = own_model(overrides, agent.config.model.as_deref());
        if team.agent_reasoners.contains_key(id)
            || (own_model.is_some() && uses_model(&settings_of(Some(id))))
        {
            per_agent
                .insert(id.clone(), make(&mut shared, &settings_of(Some(id)), own_model).await?);
        }
    }
    // Like an agent's: a role with a reasoner table, or a model of its own on a model reasoner.
    let mut per_role = BTreeMap::new();
    for role in team.spec.roles.roles() {
        let settings = role_settings_of(&role.name);
        let own_model = own_model(overrides, role.model.as_deref());
        if team.role_reasoners.contains_key(&role.name)
            || (own_model.is_some() && uses_model(&settings))
        {
            per_role.insert(role.name.clone(), make(&mut shared, &settings, own_model).await?);
        }
    }
    Ok(Reasoning { default, per_agent, per_role, ledger: shared.map(|s| s.ledger) })
}

/// The usage ledger and the conversations of `team`'s model reasoners: kept in `store`
/// (continuing from what it holds), or in memory.
fn ledger_and_conversations(
    team: &TeamFile,
    store: Option<&RunStore>,
) -> Result<(UsageLedger, Conversations), SettingError> {
    let Some(store) = store else {
        let ledger = UsageLedger::new(team.prices.clone(), team.budget.clone());
        return Ok((ledger, Conversations::in_memory(team.conversation)));
    };
    let llm_store: Arc<dyn LlmStore> =
        Arc::new(SledLlmStore::open(store).map_err(|e| SettingError(format!("run store: {e}")))?);
    let ledger = UsageLedger::stored(team.prices.clone(), team.budget.clone(), llm_store.clone())
        .map_err(|e| SettingError(format!("run store: usage ledger: {e}")))?;
    Ok((ledger, Conversations::stored(team.conversation, llm_store)))
}

/// `settings` with what the command line gives: the kind of `--reasoner`, the base URL of
/// `--base-url`, the model of `--model`. Switching to the embedded model drops a `model`
/// written for another kind: the embedded provider has one model, and a file written for a
/// server (`model = "gpt-4o-mini"`) should run on it unchanged.
fn overridden(settings: &ReasonerSettings, overrides: &Overrides) -> ReasonerSettings {
    let mut s = settings.clone();
    if let Some(k) = overrides.kind {
        if k == ReasonerKind::Local && s.kind != ReasonerKind::Local {
            s.model = None;
        }
        s.kind = k;
    }
    if let Some(url) = &overrides.base_url {
        s.base_url = Some(url.clone());
    }
    if let Some(model) = &overrides.model {
        s.model = Some(model.clone());
    }
    if overrides.small_model {
        s.small_model = true;
    }
    s
}

/// An agent's or role's own `model`, unless `--model` gives every agent's.
fn own_model<'a>(overrides: &Overrides, own: Option<&'a str>) -> Option<&'a str> {
    if overrides.model.is_some() { None } else { own }
}

/// A kind override alone (what [`check_planning`] needs).
fn kind_only(kind: Option<ReasonerKind>) -> Overrides {
    Overrides { kind, ..Overrides::default() }
}

/// The reasoner settings of agent `id` (the default's if it has none of its own), with
/// `kind_override`.
fn agent_settings(
    team: &TeamFile,
    id: &AgentId,
    kind_override: Option<ReasonerKind>,
) -> ReasonerSettings {
    overridden(
        team.agent_reasoners.get(id).unwrap_or(&team.default_reasoner),
        &kind_only(kind_override),
    )
}

/// The reasoner settings of the agents of `role` (the default's if it has none of its own),
/// with `overrides`.
fn role_settings(team: &TeamFile, role: &str, overrides: &Overrides) -> ReasonerSettings {
    overridden(team.role_reasoners.get(role).unwrap_or(&team.default_reasoner), overrides)
}

/// Whether a reasoner of these settings plans and chooses its own tool calls
/// (`Reasoner::plans`): the model reasoners (`LlmReasoner`) do, the rule-based one does not.
fn plans(settings: &ReasonerSettings) -> bool {
    settings.kind != ReasonerKind::RuleBased
}

/// Refuses a task that is not scripted (goal steps, or only a goal) when a reasoner that would
/// have to plan it does not: the first top power (it proposes, and plans a goal-only task), and
/// whoever carries out a goal step (the step's role, else every executor the step reaches; for
/// a goal-only task, at least one executor or bottom role). Run before anything is written.
///
/// An executor (or a bottom role) with an executor `kind` needs no planning reasoner for a
/// goal step: the kind runs it, the step's description its objective. A task whose goal steps
/// each name an executor with a kind, or a domain whose every executor has one, is accepted on
/// any reasoner (as `Team::submit` accepts it).
pub fn check_planning(
    team: &TeamFile,
    kind_override: Option<ReasonerKind>,
    task: &Task,
) -> Result<(), SettingError> {
    if task.is_scripted() {
        return Ok(());
    }
    let planning = Planning { team, kind_override };
    let goal_steps = || task.steps.iter().filter(|s| !s.is_scripted());
    if !task.steps.is_empty() && goal_steps().all(|step| planning.by_kind(step)) {
        return Ok(());
    }
    let ids: Vec<&str> = goal_steps().map(|s| s.id.as_str()).collect();
    let what = if ids.is_empty() {
        "has only a goal, which needs".to_owned()
    } else {
        format!("has goal steps ({}), which need", ids.join(", "))
    };
    let refusal = match planning.proposer_refusal() {
        Some(who) => Some(who),
        None if task.steps.is_empty() => planning.goal_only_refusal(),
        None => goal_steps().find_map(|step| planning.step_refusal(step)),
    };
    match refusal {
        Some(who) => Err(SettingError(format!(
            "this task {what} a reasoner that plans, but {who} the rule-based one: use --reasoner openai, anthropic or local, or give it a model reasoner in the team file (the rule-based reasoner runs only steps that name their tool and args)"
        ))),
        None => Ok(()),
    }
}

/// Who would have to plan a task that is not scripted, and whether their reasoners do.
struct Planning<'a> {
    team: &'a TeamFile,
    kind_override: Option<ReasonerKind>,
}

impl Planning<'_> {
    fn agents(&self) -> &[agent_pool::AgentSpec] {
        &self.team.spec.agents
    }

    /// An executor with an executor `kind` runs goal steps without planning them.
    fn has_kind(&self, id: &AgentId) -> bool {
        self.agents().iter().any(|a| {
            &a.config.id == id && matches!(&a.role, RoleSpec::Bottom(b) if b.kind.is_some())
        })
    }

    fn role_has_kind(&self, role: &str) -> bool {
        self.team.spec.roles.get(role).is_some_and(|r| r.kind.is_some())
    }

    fn agent_plans(&self, id: &AgentId) -> bool {
        plans(&agent_settings(self.team, id, self.kind_override))
    }

    fn role_plans(&self, role: &str) -> bool {
        plans(&role_settings(self.team, role, &kind_only(self.kind_override)))
    }

    /// As the team decides (`Team::submit`): a goal step for an executor with a kind, or for
    /// a domain whose every executor has one, is run by the kind.
    fn by_kind(&self, step: &agent_state::PlanStep) -> bool {
        match &step.target {
            StepTarget::Agent(id) => self.has_kind(id),
            StepTarget::Domain(_) => {
                let reached = reached(self.agents(), &step.target, self.team.spec.shape());
                !reached.is_empty() && reached.into_iter().all(|id| self.has_kind(id))
            }
            StepTarget::Any => false,
        }
    }

    /// The team's entry agent takes the task (and plans a goal-only one): the first top
    /// power, which proposes it; a crew's lead; a single agent.
    fn proposer_refusal(&self) -> Option<String> {
        let entry = self.team.spec.entry()?;
        let id = &entry.config.id;
        let who = match self.team.spec.shape() {
            TeamShape::Layered => "the top power that proposes it",
            TeamShape::Crew => "the crew's lead, which takes it",
            TeamShape::Single => "the single agent, which takes it",
        };
        (!self.agent_plans(id)).then(|| format!("`{id}`, {who}, has"))
    }

    /// A goal-only task needs at least one executor (or bottom role) that plans.
    fn goal_only_refusal(&self) -> Option<String> {
        let executor_plans = self
            .agents()
            .iter()
            .filter(|a| a.config.layer == AgentLayer::Bottom)
            .any(|a| self.agent_plans(&a.config.id));
        let role_plans =
            self.team.spec.roles.of_layer(AgentLayer::Bottom).any(|r| self.role_plans(&r.name));
        (!executor_plans && !role_plans).then(|| "every executor (and bottom role) has".to_owned())
    }

    /// A goal step needs its role, else every executor it may reach, to plan (or have a kind).
    fn step_refusal(&self, step: &agent_state::PlanStep) -> Option<String> {
        if let Some(role) = &step.role {
            return (!self.role_has_kind(role) && !self.role_plans(role))
                .then(|| format!("the role `{role}`, which step `{}` asks for, has", step.id));
        }
        reached(self.agents(), &step.target, self.team.spec.shape())
            .into_iter()
            .find(|id| !self.has_kind(id) && !self.agent_plans(id))
            .map(|id| format!("`{id}`, an executor that may carry out step `{}`, has", step.id))
    }
}

/// The executors a step for `target` may land on.
fn reached<'a>(
    agents: &'a [agent_pool::AgentSpec],
    target: &'a StepTarget,
    shape: TeamShape,
) -> Vec<&'a AgentId> {
    let executors_under = |lead: &AgentId| -> Vec<&'a AgentId> {
        agents
            .iter()
            .filter(|a| a.config.layer == AgentLayer::Bottom)
            .filter(|a| a.config.supervisor.as_ref() == Some(lead))
            .map(|a| &a.config.id)
            .collect()
    };
    match target {
        // A crew's lead and a single agent take every domain.
        StepTarget::Domain(_) if shape == TeamShape::Single => {
            agents.iter().map(|a| &a.config.id).collect()
        }
        StepTarget::Domain(domain) => agents
            .iter()
            .find(|a| {
                matches!(&a.role, RoleSpec::Mid(m) if &m.domain == domain || shape == TeamShape::Crew)
            })
            .map(|lead| executors_under(&lead.config.id))
            .unwrap_or_default(),
        StepTarget::Agent(id) => match agents.iter().find(|a| &a.config.id == id) {
            Some(a) if a.config.layer == AgentLayer::Mid => executors_under(id),
            _ => vec![id],
        },
        StepTarget::Any => agents
            .iter()
            .filter(|a| a.config.layer == AgentLayer::Bottom)
            .map(|a| &a.config.id)
            .collect(),
    }
}

/// The reasoner for `settings`: rule-based, or a model reasoner sharing `shared`'s ledger.
async fn make(
    shared: &mut Option<Shared>,
    settings: &ReasonerSettings,
    agent_model: Option<&str>,
) -> Result<Arc<dyn Reasoner>, SettingError> {
    if settings.kind == ReasonerKind::RuleBased {
        return Ok(Arc::new(
            RuleBasedReasoner::new()
                .forbid_tools(settings.forbid_tools.clone())
                .prefer(settings.prefer.clone()),
        ));
    }
    let Some(shared) = shared.as_mut() else {
        return Err(SettingError("internal: no ledger for a model reasoner".into()));
    };
    shared.reasoner(settings, agent_model).await
}

struct Shared {
    ledger: Arc<UsageLedger>,
    conversations: Arc<Conversations>,
    boards: Arc<dyn Whiteboard>,
    tools: ToolRegistry,
    agent_tools: Arc<BTreeMap<AgentId, Arc<[String]>>>,
    /// The team's event stream, where the model reasoners publish their answers as they
    /// stream.
    events: agent_core::EventHub,
    providers: ProviderSet,
}

/// Every setting of `team` (with `overrides`) checked without building anything that lasts:
/// keys present, URLs and models valid, the model file there and intact, and `--base-url` or
/// `--model` used by some agent. Run before anything is written, so bad settings leave no run
/// behind.
pub async fn check(team: &TeamFile, overrides: &Overrides) -> Result<(), CheckError> {
    let mut set = ProviderSet::new(BTreeMap::new(), overrides, true);
    let with_override = |s: &ReasonerSettings| overridden(s, overrides);
    let mut all = vec![(with_override(&team.default_reasoner), None)];
    for agent in &team.spec.agents {
        let s = with_override(
            team.agent_reasoners.get(&agent.config.id).unwrap_or(&team.default_reasoner),
        );
        all.push((s, own_model(overrides, agent.config.model.as_deref())));
    }
    for role in team.spec.roles.roles() {
        all.push((
            role_settings(team, &role.name, overrides),
            own_model(overrides, role.model.as_deref()),
        ));
    }
    unused_flags(overrides, all.iter().map(|(s, _)| s.kind))?;
    for (s, own) in &all {
        if s.kind != ReasonerKind::RuleBased {
            set.get(s, *own).await?;
        }
    }
    // Ask each server once: does it serve the model, does it take the key, which structured
    // output mode does it take?
    for (key, provider) in &set.providers {
        provider.preflight().await.map_err(|e| {
            if e.is_transient() {
                CheckError::Unavailable(e)
            } else {
                CheckError::Setting(SettingError(format!("reasoner check before the run: {e}")))
            }
        })?;
        if let Some(choice) = provider.structured_choice() {
            learned().insert(key.clone(), choice);
        }
    }
    Ok(())
}

/// Refuses `--base-url` when no agent or role talks to a server with it (every one is
/// rule-based or the embedded model), and `--model` when none uses a model: a flag that would
/// change nothing is a mistake to point out, not to ignore.
fn unused_flags(
    overrides: &Overrides,
    kinds: impl Iterator<Item = ReasonerKind> + Clone,
) -> Result<(), SettingError> {
    let mut kinds = kinds;
    let server = |k: &ReasonerKind| matches!(k, ReasonerKind::OpenAi | ReasonerKind::Anthropic);
    let add = "add --reasoner openai (or anthropic), or give the team file's [reasoner] `kind`";
    if let Some(url) = &overrides.base_url
        && !kinds.clone().any(|k| server(&k))
    {
        return Err(SettingError(format!(
            "--base-url {url}: no agent reasons with a model server (every one has the rule-based reasoner or the embedded model); {add}"
        )));
    }
    if overrides.small_model && !kinds.clone().any(|k| server(&k)) {
        return Err(SettingError(format!(
            "--small-model: no agent reasons with a model server (the embedded model is always treated as small); {add}"
        )));
    }
    if let Some(model) = &overrides.model
        && !kinds.any(|k| k != ReasonerKind::RuleBased)
    {
        return Err(SettingError(format!(
            "--model {model}: no agent reasons with a model (every one has the rule-based reasoner); {add}"
        )));
    }
    Ok(())
}

/// The structured output modes the pre-run check learned, by provider: the run's providers
/// (built later in the same process, which runs one run) start from them instead of asking
/// again.
fn learned() -> std::sync::MutexGuard<'static, BTreeMap<ProviderKey, agent_llm::ModeChoice>> {
    static LEARNED: std::sync::Mutex<BTreeMap<ProviderKey, agent_llm::ModeChoice>> =
        std::sync::Mutex::new(BTreeMap::new());
    LEARNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Providers by settings, built once each.
struct ProviderSet {
    providers: BTreeMap<ProviderKey, Arc<dyn Provider>>,
    /// The structured output modes the run's usage report holds, by `provider/model`.
    known: BTreeMap<String, agent_llm::ModeChoice>,
    /// `$OPENAI_BASE_URL` as the run records it ([`Overrides::openai_base_url`]).
    openai_base_url: Option<String>,
    /// `--base-url`, as the run records it: a server the user named.
    flag_base_url: Option<String>,
    /// Check only: the embedded model's file is verified but the model is not loaded.
    dry_run: bool,
}

impl Shared {
    async fn reasoner(
        &mut self,
        settings: &ReasonerSettings,
        agent_model: Option<&str>,
    ) -> Result<Arc<dyn Reasoner>, SettingError> {
        let provider = self
            .providers
            .get(settings, agent_model)
            .await?
            .ok_or_else(|| SettingError("internal: the provider was not built".into()))?;
        let mut llm = LlmSettings::default();
        if let Some(max) = settings.max_tokens {
            llm.max_tokens = max;
        }
        // `[reasoner] stream = false` turns streaming (and its events) off; on by default.
        llm.stream = settings.stream.unwrap_or(true);
        if let Some(repairs) = settings.plan_repairs {
            llm.plan_repairs = repairs;
        }
        // The embedded model (or one the team file or `--small-model` says is small) cannot
        // choose among tools or write arguments: it is offered the step's own tool, with the
        // plan's arguments only, and `finish_subtask`; it decodes greedily (temperature 0)
        // unless the agent sets a temperature.
        let small = settings.kind == ReasonerKind::Local || settings.small_model;
        llm.offer_agent_tools = !small;
        llm.planned_arguments_only = small;
        llm.scripted_supervision = small;
        llm.temperature = small.then_some(0.0);
        Ok(Arc::new(
            LlmReasoner::new(provider, self.ledger.clone(), self.conversations.clone())
                .with_tools(&self.tools)
                .with_agent_tools(self.agent_tools.clone())
                .with_boards(self.boards.clone())
                .with_events(self.events.clone())
                .with_settings(llm),
        ))
    }
}

impl ProviderSet {
    fn new(
        known: BTreeMap<String, agent_llm::ModeChoice>,
        overrides: &Overrides,
        dry_run: bool,
    ) -> Self {
        let openai_base_url = overrides.openai_base_url.clone();
        let flag_base_url = overrides.base_url.clone();
        Self { providers: BTreeMap::new(), known, openai_base_url, flag_base_url, dry_run }
    }

    /// The API root of an `openai` reasoner with settings `s`: its own (`--base-url` or the
    /// team file's), else `$OPENAI_BASE_URL`, else OpenAI's.
    fn openai_base_url(&self, s: &ReasonerSettings) -> Result<String, SettingError> {
        if let Some(url) = &s.base_url {
            return Ok(url.clone());
        }
        match &self.openai_base_url {
            Some(url) => crate::url::parse_base_url(url).map_err(|e| {
                SettingError(format!(
                    "${OPENAI_BASE_URL_VAR}: {e} (it is the base URL of the `openai` reasoners without `base_url` or --base-url)"
                ))
            }),
            None => Ok(OPENAI_API.to_owned()),
        }
    }

    async fn get(
        &mut self,
        s: &ReasonerSettings,
        agent_model: Option<&str>,
    ) -> Result<Option<Arc<dyn Provider>>, SettingError> {
        let kind = s.kind.as_str();
        let model = agent_model.map(str::to_owned).or_else(|| s.model.clone());
        let base_url = match s.kind {
            ReasonerKind::OpenAi => Some(self.openai_base_url(s)?),
            _ => s.base_url.clone(),
        };
        let key = ProviderKey {
            kind,
            base_url: base_url.clone(),
            model: model.clone().unwrap_or_default(),
            api_key_env: s.api_key_env.clone(),
            timeout_ms: s.request_timeout.map(|t| t.as_millis()),
            structured_output: s.structured_output,
            small_model: s.small_model,
        };
        if let Some(p) = self.providers.get(&key) {
            return Ok(Some(p.clone()));
        }
        let provider: Arc<dyn Provider> = match s.kind {
            ReasonerKind::RuleBased => {
                return Err(SettingError("internal: rule-based has no provider".into()));
            }
            ReasonerKind::OpenAi => {
                let model = need_model(kind, model, "gpt-4o-mini")?;
                let base_url = base_url.unwrap_or_else(|| OPENAI_API.to_owned());
                self.openai(s, base_url, model, &key)?
            }
            ReasonerKind::Anthropic => {
                Arc::new(anthropic(s, need_model(kind, model, "claude-sonnet-4-5")?)?)
            }
            ReasonerKind::Local => match local_provider(model, self.dry_run).await? {
                Some(p) => p,
                None => return Ok(None), // checked, not built
            },
        };
        self.providers.insert(key, provider.clone());
        Ok(Some(provider))
    }
}

impl ProviderSet {
    /// An OpenAI-compatible provider for `model` on `base_url`.
    fn openai(
        &self,
        s: &ReasonerSettings,
        base_url: String,
        model: String,
        key: &ProviderKey,
    ) -> Result<Arc<dyn Provider>, SettingError> {
        // As the official clients: the named variable, else OPENAI_API_KEY, but that one only
        // for a server the user named (--base-url, $OPENAI_BASE_URL) or OpenAI's: never for
        // one only a team file (which may come from anyone) names.
        let named_by_user = s.base_url.is_none() || s.base_url == self.flag_base_url;
        let var = match &s.api_key_env {
            Some(var) => Some(var.as_str()),
            None if named_by_user => Some("OPENAI_API_KEY"),
            None => None,
        };
        let api_key = api_key(s, var, &base_url)?;
        let mut config = OpenAiConfig::new(base_url, model);
        config.api_key = api_key;
        if let Some(t) = s.request_timeout {
            config.timeout = t;
        }
        config.structured_output = s.structured_output;
        // A small base model is asked as the embedded one is: a transcript on /completions
        // under the answer's grammar, when the server takes it.
        config.completions = s.small_model;
        let provider = OpenAiProvider::new(config)
            .map_err(|e| SettingError(format!("team file [reasoner] kind = \"openai\": {e}")))?;
        // Start from the modes the server refused to the pre-run check, or (a resumed run)
        // before.
        let stored = self.known.get(&format!("{}/{}", provider.name(), provider.model()));
        for choice in learned().get(key).into_iter().chain(stored) {
            provider.remember(choice);
        }
        Ok(Arc::new(provider))
    }
}

/// An Anthropic provider for `model`.
fn anthropic(s: &ReasonerSettings, model: String) -> Result<AnthropicProvider, SettingError> {
    let mut config = AnthropicConfig::new(model);
    if let Some(url) = &s.base_url {
        config.base_url = url.clone();
    }
    // Without `api_key_env`, Anthropic's variable only for Anthropic's own API.
    let var = match (&s.api_key_env, &s.base_url) {
        (Some(v), _) => Some(v.as_str()),
        (None, None) => Some("ANTHROPIC_API_KEY"),
        (None, Some(_)) => None,
    };
    config.api_key = api_key(s, var, &config.base_url)?;
    if let Some(t) = s.request_timeout {
        config.timeout = t;
    }
    config.structured_output = s.structured_output;
    AnthropicProvider::new(config)
        .map_err(|e| SettingError(format!("team file [reasoner] kind = \"anthropic\": {e}")))
}

fn need_model(kind: &str, model: Option<String>, example: &str) -> Result<String, SettingError> {
    model.ok_or_else(|| {
        SettingError(format!(
            "reasoner kind \"{kind}\" needs a model: give --model NAME, or set `model = \"{example}\"` in the team file's [reasoner] table or on the agent"
        ))
    })
}

/// The key for the server at `base_url`, from the environment variable `var` (`None`: no
/// variable, no key). A variable the team file names (`api_key_env`) must be set. Otherwise a
/// server on loopback needs none: without the variable, no key is sent. Any other server
/// without one is refused, naming the variable.
fn api_key(
    s: &ReasonerSettings,
    var: Option<&str>,
    base_url: &str,
) -> Result<Option<String>, SettingError> {
    let Some(var) = var else { return Ok(None) };
    match agent_core::secrets::register_env(var) {
        Some(v) if !v.trim().is_empty() => Ok(Some(v)),
        // A variable the team file names is one its server needs, wherever it is.
        None | Some(_) if s.api_key_env.is_some() => Err(SettingError(format!(
            "reasoner kind \"{}\": the environment variable {var} (the team file's api_key_env) is not set; export it with the server's API key, or remove api_key_env if the server on {base_url} needs none",
            s.kind.as_str()
        ))),
        _ if is_loopback(base_url) => Ok(None),
        _ => Err(SettingError(format!(
            "reasoner kind \"{}\": the environment variable {var} (api_key_env) is not set, and {base_url} is not on loopback; export it with your API key, or name another variable with `api_key_env` in the team file (a server on this machine, such as http://127.0.0.1:8080/v1, needs none)",
            s.kind.as_str()
        ))),
    }
}

#[cfg(feature = "local")]
async fn local_provider(
    model: Option<String>,
    dry_run: bool,
) -> Result<Option<Arc<dyn Provider>>, SettingError> {
    check_local_model(model.as_deref())?;
    let dir = agent_llm::default_model_dir().map_err(|e| SettingError(e.to_string()))?;
    let path = agent_llm::GEMMA3_270M_Q4_K_M.path_in(&dir);
    if dry_run {
        // Reads the whole file (about 0.3 s): off the async threads.
        let verified = tokio::task::spawn_blocking(move || {
            agent_llm::verify_model(&path, &agent_llm::GEMMA3_270M_Q4_K_M)
        })
        .await
        .map_err(|e| {
            SettingError(format!("reasoner kind \"local\": the model check failed: {e}"))
        })?;
        verified.map_err(|e| SettingError(format!("reasoner kind \"local\": {e}")))?;
        return Ok(None);
    }
    let provider = agent_llm::LocalProvider::start(agent_llm::LocalConfig::new(path))
        .await
        .map_err(|e| SettingError(format!("reasoner kind \"local\": {e}")))?;
    Ok(Some(Arc::new(provider)))
}

#[cfg(not(feature = "local"))]
async fn local_provider(
    model: Option<String>,
    _dry_run: bool,
) -> Result<Option<Arc<dyn Provider>>, SettingError> {
    check_local_model(model.as_deref())?;
    Err(SettingError(
        "reasoner kind \"local\": this strata was built without the embedded model; build it with `cargo build -p agent-cli --features local` (needs cmake and clang) and fetch the model with `strata model fetch`".into(),
    ))
}

fn check_local_model(model: Option<&str>) -> Result<(), SettingError> {
    // The only model `kind = "local"` serves.
    let local = agent_llm::GEMMA3_270M_Q4_K_M.model_name();
    match model {
        None => Ok(()),
        Some(m) if m == local => Ok(()),
        Some(m) => Err(SettingError(format!(
            "unknown local model `{m}`: the embedded provider runs `{local}` only; remove `model` (or --model) or set it to \"{local}\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::path::Path;

    use agent_core::tools::ToolRegistry;
    use team_file::{ReasonerKind, ReasonerSettings, TeamFile};

    use super::{Overrides, check_planning, is_loopback, kind_only, overridden};

    /// Two leads: `docs` with a researcher (kind) and a plain executor, `notes` with a writer
    /// (kind) only; and a bottom role with a kind.
    fn kinds_team() -> TeamFile {
        let text = r#"
[[top]]
id = "top-a"
power_type = "p"

[[mid]]
id = "mid-docs"
domain = "docs"
supervisor = "top-a"

[[mid]]
id = "mid-notes"
domain = "notes"
supervisor = "top-a"

[[bottom]]
id = "bottom-r"
supervisor = "mid-docs"
tools = ["read_file"]
kind = "research_agent"

[[bottom]]
id = "bottom-plain"
supervisor = "mid-docs"
tools = ["read_file"]

[[bottom]]
id = "bottom-w"
supervisor = "mid-notes"
tools = ["write_file"]
kind = "writer_agent"

[[roles]]
name = "writer"
layer = "bottom"
tools = ["write_file"]
kind = "writer_agent"

[[roles]]
name = "thinker"
layer = "bottom"
tools = ["read_file"]
"#;
        team_file::parse_team(Path::new("team.toml"), text, &ToolRegistry::with_builtins()).unwrap()
    }

    fn check(team: &TeamFile, steps: &str) -> Result<(), String> {
        let plan = format!("id = \"t\"\ngoal = \"g\"\n{steps}");
        let task = team_file::parse_plan(
            Path::new("plan.toml"),
            &plan,
            &team.spec,
            &ToolRegistry::with_builtins(),
        )
        .unwrap();
        check_planning(team, None, &task).map_err(|e| e.0)
    }

    #[test]
    fn a_goal_step_for_executors_with_a_kind_needs_no_planning_reasoner() {
        let team = kinds_team();
        let goal_step = |target: &str| {
            format!("[[steps]]\nid = \"s\"\ndescription = \"find the greeting\"\n{target}\n")
        };
        // The kind runs it: an executor with a kind, a domain whose executors all have one.
        for target in ["agent = \"bottom-r\"", "domain = \"notes\""] {
            assert_eq!(check(&team, &goal_step(target)), Ok(()), "{target}");
        }
        let both = format!(
            "{}{}",
            goal_step("agent = \"bottom-r\""),
            goal_step("domain = \"notes\"").replace("\"s\"", "\"t\"")
        );
        assert_eq!(check(&team, &both), Ok(()));
        // A step for a role, or for any executor, is placed by the team: it needs a planner.
        let err = check(&team, &goal_step("role = \"writer\"")).unwrap_err();
        assert!(err.contains("`top-a`, the top power that proposes it"), "{err}");
        // Another executor the step may land on cannot plan it: refused, naming it (and the
        // top power that proposes the task).
        let err = check(&team, &goal_step("domain = \"docs\"")).unwrap_err();
        assert!(
            err.contains("this task has goal steps (s), which need a reasoner that plans"),
            "{err}"
        );
        assert!(err.contains("`top-a`, the top power that proposes it"), "{err}");
        let err = check(&team, &goal_step("role = \"thinker\"")).unwrap_err();
        assert!(err.contains("which need a reasoner that plans"), "{err}");
        let err = check(&team, &goal_step("")).unwrap_err();
        assert!(err.contains("which need a reasoner that plans"), "{err}");
        // A goal-only task still needs a planner.
        let err = check(&team, "").unwrap_err();
        assert!(err.contains("this task has only a goal"), "{err}");
        // And the refusal for a team without kinds is unchanged.
        let plain = team_file::default_team();
        let err = check(&plain, &goal_step("domain = \"docs\"")).unwrap_err();
        assert!(err.contains("which need a reasoner that plans"), "{err}");
    }

    #[test]
    fn switching_to_the_embedded_model_drops_a_model_named_for_another_kind() {
        let mut server = team_file::default_team().default_reasoner;
        server.kind = ReasonerKind::OpenAi;
        server.model = Some("gpt-4o-mini".into());
        let local = overridden(&server, &kind_only(Some(ReasonerKind::Local)));
        assert_eq!((local.kind, local.model), (ReasonerKind::Local, None));
        // Another server kind keeps the model; no override keeps everything.
        let other = overridden(&server, &kind_only(Some(ReasonerKind::Anthropic)));
        assert_eq!(other.model.as_deref(), Some("gpt-4o-mini"));
        let same: ReasonerSettings = overridden(&server, &Overrides::default());
        assert_eq!(same, server);
        // A file that says `local` itself keeps its (checked) model name.
        let mut embedded = server.clone();
        embedded.kind = ReasonerKind::Local;
        embedded.model = Some("gemma-3-270m-q4_k_m".into());
        assert_eq!(
            overridden(&embedded, &kind_only(Some(ReasonerKind::Local))).model,
            embedded.model
        );
    }

    #[test]
    fn base_url_and_model_flags_override_every_setting_and_keep_the_rest() {
        let mut file = team_file::default_team().default_reasoner;
        file.kind = ReasonerKind::OpenAi;
        file.base_url = Some("http://10.0.0.5:8000/v1".into());
        file.model = Some("from-the-file".into());
        file.api_key_env = Some("MY_KEY".into());
        let flags = Overrides {
            kind: Some(ReasonerKind::OpenAi),
            base_url: Some("http://127.0.0.1:9/v1".into()),
            model: Some("from-the-flag".into()),
            openai_base_url: Some("http://192.0.2.1/v1".into()),
            small_model: true,
        };
        let s = overridden(&file, &flags);
        assert!(s.small_model, "--small-model sets the file's small_model");
        assert!(!overridden(&file, &Overrides::default()).small_model);
        assert_eq!(s.base_url.as_deref(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(s.model.as_deref(), Some("from-the-flag"));
        assert_eq!(s.api_key_env.as_deref(), Some("MY_KEY"));
        // `--model` is kept on the embedded model too (and checked there).
        let local = overridden(&file, &Overrides { kind: Some(ReasonerKind::Local), ..flags });
        assert_eq!(local.model.as_deref(), Some("from-the-flag"));
    }

    #[test]
    fn loopback_is_localhost_127_slash_8_and_ipv6_one_only() {
        for url in [
            "http://127.0.0.1:8080/v1",
            "http://127.3.4.5/v1",
            "http://localhost:11434/v1",
            "https://LOCALHOST./v1",
            "http://[::1]:8000/v1",
            "http://user:pw@127.0.0.1:1/v1",
        ] {
            assert!(is_loopback(url), "{url}");
        }
        for url in [
            "https://api.openai.com/v1",
            "http://10.0.0.5:8000/v1",
            "http://127.0.0.1.example.com/v1",
            "http://localhost.example.com/v1",
            "http://127.0.0.1@example.com/v1",
            "http://example.com\\@127.0.0.1/v1",
            "http://[::2]/v1",
            "http://0.0.0.0:8080/v1",
            "not a url",
        ] {
            assert!(!is_loopback(url), "{url}");
        }
    }
}
