//! Spawning agents while a team works (seed 003 `AgentManager`): the [`Spawner`] a layer asks
//! to create, list and dismiss its subordinates, and the supervisor tools a model calls to do
//! it ([`SUPERVISOR_TOOLS`], [`supervisor_tool_specs`]).
//!
//! The runtime of one agent does not own the pool: `agent-pool` implements [`Spawner`] and hands
//! it to every agent in [`AgentDeps::spawner`](crate::AgentDeps). Each spawn is audited as
//! [`AuditEvent::Spawned`](crate::AuditEvent::Spawned) by its supervisor before the agent is
//! created, which is what a resumed run rebuilds spawned agents from.

use agent_state::{AgentId, AgentLayer, AgentStatus};
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

/// The name, description and JSON argument schema of an agent-management tool (seed 003's
/// definitions), for a reasoner to offer as a native tool call.
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
            parameters: json!({
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
            }),
        },
    ]
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
    /// This team cannot spawn (no roles, or no spawner).
    #[error("this team has no roles to spawn")]
    Unavailable,
    /// Creating or stopping the agent failed in the runtime.
    #[error("{0}")]
    Failed(String),
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
