//! Spawning agents while a team works (docs/concepts.md#roles-and-spawning): the [`Spawner`] a
//! layer asks to create, list and dismiss its subordinates, and the supervisor tools a model calls
//! to do it ([`SUPERVISOR_TOOLS`], [`supervisor_tool_specs`]).
//!
//! The runtime of one agent does not own the pool: `agent-pool` implements [`Spawner`] and hands
//! it to every agent in [`AgentDeps::spawner`](crate::AgentDeps). Each spawn is audited as
//! [`AuditEvent::Spawned`](crate::AuditEvent::Spawned) by its supervisor before the agent is
//! created, which is what a resumed run rebuilds spawned agents from.
//!
//! A spawned agent gets at most its spawner's tools, network and capabilities. A
//! `spawn_agent` call names a role and a task, nothing else (its schema has
//! `additionalProperties: false`, and the runtime refuses a call with any other argument,
//! such as `tools` or `network`, with [`SpawnError::ExtraArguments`]): the new agent holds what
//! its role defines. The spawner then checks that definition against what the caller holds
//! with [`check_grant`], in every layer combination: tools (a role of the caller's own layer
//! holds none the caller lacks; across layers the caller's `enabled_agents`, as the team file
//! was loaded and checked, is the grant, since a lead holds no tools), capabilities (none the
//! caller's layer may hold and the caller does not), and the network (only where the caller
//! has it, [`NetworkGrants`]). A refusal is a [`SpawnError::Widens`], audited as `Denied` by the
//! caller, and nothing is spawned.

use std::collections::BTreeMap;

use agent_state::{AgentId, AgentLayer, AgentStatus, Capability};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::json;
use thiserror::Error;

/// `spawn_agent(role_name, task_prompt)`.
pub const SPAWN_AGENT: &str = "spawn_agent";
/// `speak_to_agent(agent_id, message)`.
pub const SPEAK_TO_AGENT: &str = "speak_to_agent";
/// `get_agents()`.
pub const GET_AGENTS: &str = "get_agents";
/// `despawn_agent(agent_id)`.
pub const DESPAWN_AGENT: &str = "despawn_agent";
/// `return_results(result)`.
pub const RETURN_RESULTS: &str = "return_results";

/// The tools an agent whose role may spawn is offered (besides its own).
pub const SUPERVISOR_TOOLS: [&str; 4] = [SPAWN_AGENT, SPEAK_TO_AGENT, GET_AGENTS, DESPAWN_AGENT];

/// Whether `tool` is one of the agent-management tools the runtime carries out itself (the
/// four supervisor tools and `return_results`) rather than the tool registry.
pub fn is_agent_tool(tool: &str) -> bool {
    SUPERVISOR_TOOLS.contains(&tool) || tool == RETURN_RESULTS
}

/// The name, description and JSON argument schema of an agent-management tool, for a reasoner to
/// offer as a native tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentToolSpec {
    /// The tool's name.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// Its arguments' JSON schema.
    pub parameters: serde_json::Value,
}

/// The specs of the five agent-management tools.
pub fn supervisor_tool_specs() -> Vec<AgentToolSpec> {
    vec![
        AgentToolSpec {
            name: SPAWN_AGENT,
            description: "Creates and starts a new worker agent with a specific role and task. The new agent runs independently with its own conversation history and cost tracking, and returns its results to you when done. Use this to delegate specialized sub-tasks to expert agents. Returns the new agent's id.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "role_name": {"type": "string", "minLength": 1, "description": "The role of the new agent. Must be one of the roles you may spawn."},
                    "task_prompt": {"type": "string", "minLength": 1, "description": "Detailed, specific and actionable instruction for the new agent."}
                },
                "required": ["role_name", "task_prompt"],
                "additionalProperties": false
            }),
        },
        AgentToolSpec {
            name: SPEAK_TO_AGENT,
            description: "Sends a follow-up message to one of your worker agents (or to your supervisor) and returns its reply: additional instructions, clarifications, feedback, or a request for a progress update.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "agent_id": {"type": "string", "minLength": 1, "description": "The id of the agent, from spawn_agent or get_agents."},
                    "message": {"type": "string", "minLength": 1, "description": "The message, instruction or question."}
                },
                "required": ["agent_id", "message"],
                "additionalProperties": false
            }),
        },
        AgentToolSpec {
            name: GET_AGENTS,
            description: "Lists the worker agents you spawned, with their id, role, status, task, whether they returned results, and their cost so far.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "include_completed": {"type": "boolean", "description": "Also list agents that finished or were dismissed (default true)."}
                },
                "additionalProperties": false
            }),
        },
        AgentToolSpec {
            name: DESPAWN_AGENT,
            description: "Shuts one of your worker agents down cleanly (its own workers first) and returns its final summary.",
            parameters: json!({
                "type": "object",
                "properties": {
                    "agent_id": {"type": "string", "minLength": 1, "description": "The id of the agent to dismiss."}
                },
                "required": ["agent_id"],
                "additionalProperties": false
            }),
        },
        AgentToolSpec {
            name: RETURN_RESULTS,
            description: "Concludes your assigned task and passes structured results back to your supervisor. Artifacts you claim as created or modified must be files your own tool calls wrote.",
            parameters: return_results_parameters(),
        },
    ]
}

/// The arguments of `return_results`: the result's status, summary, artifacts and known issues.
fn return_results_parameters() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "result": {
                "type": "object",
                "properties": {
                    "status": {"type": "string", "enum": ["success", "failure", "partial"]},
                    "summary": {"type": "string", "minLength": 1},
                    "artifacts": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "file_path": {"type": "string", "minLength": 1},
                                "description": {"type": "string"},
                                "change_type": {"type": "string", "enum": ["created", "modified", "deleted", "referenced"]}
                            },
                            "required": ["file_path", "description", "change_type"],
                            "additionalProperties": false
                        }
                    },
                    "known_issues": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["status", "summary", "artifacts", "known_issues"],
                "additionalProperties": false
            }
        },
        "required": ["result"],
        "additionalProperties": false
    })
}

/// The spec of the agent-management tool `name`.
pub fn supervisor_tool_spec(name: &str) -> Option<AgentToolSpec> {
    supervisor_tool_specs().into_iter().find(|s| s.name == name)
}

/// A request to create an agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnRequest {
    /// Who asks; it becomes the new agent's supervisor.
    pub parent: AgentId,
    /// The role to create.
    pub role: String,
    /// Its task, in words.
    pub task_prompt: String,
    /// Unique per spawn within the parent (the parent's journal key of the call): asking
    /// again with the same key (a call replayed after a crash) returns the agent created the
    /// first time instead of a second one.
    pub key: String,
    /// For a lead: the domain it leads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
}

/// An agent that was spawned: what a resumed run and `inspect tree` rebuild it from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnRecord {
    /// The new agent.
    pub agent: AgentId,
    /// Its supervisor.
    pub parent: AgentId,
    /// Its role.
    pub role: String,
    /// Its layer.
    pub layer: AgentLayer,
    /// Its task, in words.
    pub task_prompt: String,
    /// The spawn's key (see [`SpawnRequest::key`]).
    pub key: String,
    /// For a lead: its domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Its depth in the spawn tree: 1 for an agent spawned by a top power or a configured
    /// agent, one more for each spawn below.
    pub depth: u32,
}

/// What `get_agents` tells about one subordinate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Subordinate {
    /// The agent.
    pub agent_id: AgentId,
    /// Its role.
    pub role_name: String,
    /// Its status.
    pub status: AgentStatus,
    /// Its task, in words (shortened).
    pub task_prompt: String,
    /// What it is doing now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_work: Option<String>,
    /// Whether it has returned its results.
    pub has_result: bool,
    /// What it (and the agents it spawned) cost so far, in USD, when prices are known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Its supervisor.
    pub parent_id: AgentId,
}

/// A spawn, despawn or listing that is refused. The message is what the model sees.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SpawnError {
    /// No role of that name.
    #[error("unknown role `{role}`; the roles you may spawn are: {allowed}")]
    UnknownRole {
        /// The role asked for.
        role: String,
        /// The roles the caller may spawn.
        allowed: String,
    },
    /// The caller's role does not enable it.
    #[error(
        "your role may not spawn `{role}` (it is not in your role's `enabled_agents`); you may spawn: {allowed}"
    )]
    NotEnabled {
        /// The role asked for.
        role: String,
        /// The roles the caller may spawn.
        allowed: String,
    },
    /// `max_instances` agents of the role are alive.
    #[error("role `{role}` has its maximum of {max} agent(s) alive; despawn one first")]
    MaxInstances {
        /// The role.
        role: String,
        /// Its limit.
        max: u32,
    },
    /// The pool is full.
    #[error("the team's pool is full ({max} agents); despawn an agent first")]
    PoolFull {
        /// The pool's limit.
        max: usize,
    },
    /// The spawn tree would be deeper than allowed.
    #[error(
        "spawning here would make the spawn tree {depth} levels deep, past its limit of {max}; do the work yourself or ask your supervisor"
    )]
    TooDeep {
        /// The depth the new agent would have.
        depth: u32,
        /// The limit.
        max: u32,
    },
    /// The agent does not exist.
    #[error("there is no agent `{agent}`; call get_agents to list your agents")]
    NoSuchAgent {
        /// The id given.
        agent: String,
    },
    /// The agent is not the caller's subordinate (nor its supervisor, for speaking).
    #[error(
        "agent `{agent}` is not one of your subordinates; you may only address agents you spawned (get_agents lists them) or your supervisor"
    )]
    Stranger {
        /// The id given.
        agent: String,
    },
    /// A permission the caller does not hold itself would be given away.
    #[error(
        "role `{role}` holds {what}, which you do not hold; permissions only narrow down the tree"
    )]
    Widens {
        /// The role.
        role: String,
        /// What it would hold beyond the caller.
        what: String,
    },
    /// A `spawn_agent` call with arguments besides `role_name` and `task_prompt`, such as
    /// `tools`, `network` or `capabilities`: a spawn cannot ask for more than the role holds.
    #[error(
        "spawn_agent takes only `role_name` and `task_prompt`, not {names}: the new agent holds what its role defines (tools, network, capabilities), at most what you hold"
    )]
    ExtraArguments {
        /// The other arguments, quoted and comma-separated.
        names: String,
    },
    /// This team cannot spawn (no roles, or no spawner).
    #[error("this team has no roles to spawn")]
    Unavailable,
    /// Creating or stopping the agent failed in the runtime.
    #[error("{0}")]
    Failed(String),
}

/// The arguments a `spawn_agent` call may carry: `role_name` and `task_prompt`.
pub const SPAWN_ARGUMENTS: [&str; 2] = ["role_name", "task_prompt"];

/// Refuses a `spawn_agent` call's arguments when they hold anything besides
/// [`SPAWN_ARGUMENTS`] (a model asking for extra `tools`, `network: true` or `capabilities`).
pub fn check_spawn_arguments(args: &serde_json::Value) -> Result<(), SpawnError> {
    let Some(map) = args.as_object() else { return Ok(()) };
    let extra: Vec<String> = map
        .keys()
        .filter(|k| !SPAWN_ARGUMENTS.contains(&k.as_str()))
        .map(|k| format!("`{}`", k.chars().take(40).collect::<String>()))
        .collect();
    if extra.is_empty() {
        Ok(())
    } else {
        Err(SpawnError::ExtraArguments { names: extra.join(", ") })
    }
}

/// Which agents' commands may use the network, as the team file sets it (`[sandbox] network`,
/// and the `network` of executors and roles): what a spawn's network is checked against.
/// The default (no network anywhere) is a team without a sandbox section.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkGrants {
    /// `[sandbox] network`: every agent's unless its own or its role's says otherwise.
    pub default: bool,
    /// Configured agents with their own `network`.
    pub agents: BTreeMap<AgentId, bool>,
    /// Roles with their own `network`, by role name.
    pub roles: BTreeMap<String, bool>,
}

impl NetworkGrants {
    /// Whether the commands of `agent` (of role `role`, if any) may use the network: its own
    /// setting, else its role's, else the default.
    pub fn of(&self, agent: &AgentId, role: Option<&str>) -> bool {
        self.agents
            .get(agent)
            .or_else(|| role.and_then(|r| self.roles.get(r)))
            .copied()
            .unwrap_or(self.default)
    }

    /// Whether the agents of role `role` may use the network.
    pub fn of_role(&self, role: &str) -> bool {
        self.roles.get(role).copied().unwrap_or(self.default)
    }
}

/// What an agent holds that it could pass on to an agent it spawns (or what a role would
/// give the agent spawned with it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holdings {
    /// Its layer.
    pub layer: AgentLayer,
    /// Its workspace tools.
    pub tools: Vec<String>,
    /// Its capabilities.
    pub capabilities: Vec<Capability>,
    /// Whether its commands may use the network.
    pub network: bool,
}

/// Checks that an agent holding `child` (of role `role`) may be spawned by one holding
/// `spawner`: permissions only narrow down the tree, in every layer combination.
///
/// - Tools: when the spawner's layer may hold tools (`tool_call`) or the new agent is of its
///   own layer, every tool of the new agent is one the spawner holds; otherwise (a lead, which
///   holds no tools, spawning an executor) the grant is the spawner's `enabled_agents`, as the
///   team file defines those roles, which the caller checks before.
/// - Capabilities: the new agent holds no capability the spawner's layer may hold and the
///   spawner does not (the capabilities only the new agent's layer may hold, such as an
///   executor's `tool_call`, are granted the same way as its tools).
/// - Network: the new agent has it only if the spawner has it.
///
/// A top power's network is not checked: the powers are the root of the tree, and the team
/// file's mid roles, as it defines them, are their grant.
pub fn check_grant(spawner: &Holdings, role: &str, child: &Holdings) -> Result<(), SpawnError> {
    let widen = |what: String| Err(SpawnError::Widens { role: role.to_owned(), what });
    if (spawner.layer == child.layer || spawner.layer.allows(Capability::ToolCall))
        && let Some(t) = child.tools.iter().find(|t| !spawner.tools.contains(t))
    {
        return widen(format!("the tool `{t}`"));
    }
    if let Some(c) = child
        .capabilities
        .iter()
        .find(|c| spawner.layer.allows(**c) && !spawner.capabilities.contains(c))
    {
        return widen(format!("the capability `{c}`"));
    }
    if child.network && !spawner.network && spawner.layer != AgentLayer::Top {
        return widen("the network".to_owned());
    }
    Ok(())
}

/// Creates, lists and dismisses agents on behalf of agents. Implemented by `agent-pool`.
#[async_trait]
pub trait Spawner: Send + Sync {
    /// Creates an agent of `request.role` supervised by `request.parent`, or returns the one a
    /// request with the same parent and key created before. The spawn is audited before the
    /// agent is created.
    async fn spawn(&self, request: SpawnRequest) -> Result<SpawnRecord, SpawnError>;

    /// Shuts `agent`, a subordinate of `caller`, down: its own subordinates first, then it
    /// (to terminated). Returns its final summary (what it was doing, its last result).
    async fn despawn(&self, caller: &AgentId, agent: &AgentId) -> Result<String, SpawnError>;

    /// `caller`'s subordinates that were spawned (not the configured ones).
    async fn subordinates(&self, caller: &AgentId) -> Vec<Subordinate>;

    /// How `agent` was spawned, if it was.
    fn record(&self, agent: &AgentId) -> Option<SpawnRecord>;

    /// Whether `agent` is an agent of the team (configured or spawned).
    fn exists(&self, agent: &AgentId) -> bool;

    /// The roles `caller` may spawn (its role's `enabled_agents`; any mid role for a top
    /// power), with each one's description.
    fn enabled_roles(&self, caller: &AgentId) -> Vec<(String, String)>;
}

/// What each agent's reasoning has cost so far: `get_agents` and `inspect tree` show it, rolled
/// up from every agent to its spawner. agent-llm's `UsageLedger` is one.
pub trait CostMeter: Send + Sync {
    /// What `agent`'s own calls cost, in USD, when prices are known.
    fn cost_usd(&self, agent: &AgentId) -> Option<f64>;
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    fn holds(layer: AgentLayer, tools: &[&str], caps: &[Capability], network: bool) -> Holdings {
        Holdings {
            layer,
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            capabilities: caps.to_vec(),
            network,
        }
    }

    fn lead(network: bool) -> Holdings {
        holds(AgentLayer::Mid, &[], AgentLayer::Mid.default_capabilities(), network)
    }

    fn executor(tools: &[&str], network: bool) -> Holdings {
        holds(AgentLayer::Bottom, tools, AgentLayer::Bottom.default_capabilities(), network)
    }

    #[test]
    fn a_spawn_within_the_grant_is_allowed_in_every_layer_combination() {
        let top = holds(AgentLayer::Top, &[], AgentLayer::Top.default_capabilities(), false);
        assert_eq!(check_grant(&top, "lead", &lead(false)), Ok(()));
        // A lead holds no tools: its executors' tools are granted by its `enabled_agents`.
        assert_eq!(check_grant(&lead(false), "writer", &executor(&["write_file"], false)), Ok(()));
        assert_eq!(check_grant(&lead(true), "fetcher", &executor(&["shell"], true)), Ok(()));
        assert_eq!(check_grant(&lead(true), "sublead", &lead(true)), Ok(()));
        // The powers are the root: the team file's mid roles, network included, are theirs.
        assert_eq!(check_grant(&top, "lead", &lead(true)), Ok(()));
    }

    #[test]
    fn a_spawn_with_the_network_its_spawner_lacks_is_refused() {
        let err = check_grant(&lead(false), "fetcher", &executor(&["shell"], true)).unwrap_err();
        assert_eq!(err, SpawnError::Widens { role: "fetcher".into(), what: "the network".into() });
        assert!(err.to_string().contains("which you do not hold"), "{err}");
        // Same layer too.
        assert!(check_grant(&lead(false), "sublead", &lead(true)).is_err());
    }

    #[test]
    fn a_spawn_with_capabilities_beyond_its_spawner_is_refused_across_layers() {
        // A lead without `plan` may not create an executor that plans.
        let narrow = holds(AgentLayer::Mid, &[], &[Capability::Delegate], false);
        let err = check_grant(&narrow, "writer", &executor(&[], false)).unwrap_err();
        assert_eq!(
            err,
            SpawnError::Widens { role: "writer".into(), what: "the capability `plan`".into() }
        );
        // A top power without `review` may not create a lead that reviews.
        let top = holds(AgentLayer::Top, &[], &[Capability::Plan, Capability::Delegate], true);
        let err = check_grant(&top, "lead", &lead(false)).unwrap_err();
        assert!(err.to_string().contains("`reflect`"), "{err}");
        // Capabilities only the new agent's layer may hold come with its role.
        let bare = holds(AgentLayer::Mid, &[], AgentLayer::Mid.default_capabilities(), false);
        assert_eq!(check_grant(&bare, "writer", &executor(&["shell"], false)), Ok(()));
    }

    #[test]
    fn a_spawn_with_a_tool_its_same_layer_spawner_lacks_is_refused() {
        let spawner = executor(&["read_file"], false);
        let err =
            check_grant(&spawner, "writer", &executor(&["read_file", "shell"], false)).unwrap_err();
        assert_eq!(
            err,
            SpawnError::Widens { role: "writer".into(), what: "the tool `shell`".into() }
        );
    }

    #[test]
    fn a_spawn_call_with_extra_arguments_is_refused() {
        let ok = json!({"role_name": "writer", "task_prompt": "write it"});
        assert_eq!(check_spawn_arguments(&ok), Ok(()));
        for extra in [
            json!({"role_name": "writer", "task_prompt": "t", "tools": ["shell"]}),
            json!({"role_name": "writer", "task_prompt": "t", "network": true}),
            json!({"role_name": "writer", "task_prompt": "t", "capabilities": ["arbitrate"]}),
        ] {
            let err = check_spawn_arguments(&extra).unwrap_err();
            assert!(matches!(err, SpawnError::ExtraArguments { .. }), "{err}");
            assert!(err.to_string().contains("takes only `role_name` and `task_prompt`"), "{err}");
        }
        // The schema a model is offered says the same.
        let spec = supervisor_tool_spec(SPAWN_AGENT).unwrap();
        assert_eq!(spec.parameters["additionalProperties"], json!(false));
        let props = spec.parameters["properties"].as_object().unwrap();
        assert_eq!(props.keys().map(String::as_str).collect::<Vec<_>>(), SPAWN_ARGUMENTS);
    }

    #[test]
    fn the_network_of_an_agent_is_its_own_else_its_roles_else_the_default() {
        let grants = NetworkGrants {
            default: false,
            agents: [(AgentId::new("fetcher"), true)].into(),
            roles: [("lead".to_owned(), true)].into(),
        };
        assert!(grants.of(&AgentId::new("fetcher"), None));
        assert!(grants.of(&AgentId::new("lead-1"), Some("lead")));
        assert!(!grants.of(&AgentId::new("other"), Some("writer")));
        assert!(grants.of_role("lead"));
        assert!(!grants.of_role("writer"));
    }
}
