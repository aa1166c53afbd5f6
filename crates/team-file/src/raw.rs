//! The files as written: the structures `toml` reads a team and a plan file into, with the
//! byte span of every value that an error may point at, and [`Entry`], one agent of a team
//! file whatever its layer.

use std::collections::BTreeMap;

use agent_state::AgentLayer;
use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTeam {
    /// `layered`, `crew` or `single`; left out, the shape the agents make.
    #[serde(default)]
    pub(crate) shape: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) heartbeat: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) max_agents: Option<Spanned<usize>>,
    #[serde(default)]
    pub(crate) max_spawn_depth: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) reasoner: Option<RawReasoner>,
    #[serde(default)]
    pub(crate) prices: Option<BTreeMap<String, Spanned<RawPrice>>>,
    #[serde(default)]
    pub(crate) budget: Option<RawBudget>,
    #[serde(default)]
    pub(crate) conversation: Option<RawConversation>,
    #[serde(default)]
    pub(crate) timeouts: Option<RawTimeouts>,
    #[serde(default)]
    pub(crate) guards: Option<RawGuards>,
    #[serde(default)]
    pub(crate) arbitration: Option<RawArbitration>,
    #[serde(default)]
    pub(crate) approvals: Option<RawApprovals>,
    #[serde(default)]
    pub(crate) top: Vec<RawTop>,
    #[serde(default)]
    pub(crate) mid: Vec<RawMid>,
    #[serde(default)]
    pub(crate) bottom: Vec<RawBottom>,
    #[serde(default)]
    pub(crate) roles: Vec<RawRole>,
    #[serde(default)]
    pub(crate) http: Option<RawHttp>,
    #[serde(default)]
    pub(crate) endpoints: Vec<RawEndpoint>,
    #[serde(default)]
    pub(crate) executor: Option<RawExecutor>,
    #[serde(default)]
    pub(crate) sandbox: Option<RawSandbox>,
    #[serde(default)]
    pub(crate) mcp_servers: Vec<RawMcpServer>,
}

/// An `[[mcp_servers]]` table: an MCP server whose tools the executors may list.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMcpServer {
    pub(crate) name: Spanned<String>,
    #[serde(default)]
    pub(crate) command: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) args: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) env: Option<BTreeMap<String, Spanned<String>>>,
    #[serde(default)]
    pub(crate) url: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) sandbox: Option<Spanned<bool>>,
    #[serde(default)]
    pub(crate) network: Option<Spanned<bool>>,
    #[serde(default)]
    pub(crate) pass_env: Option<Vec<Spanned<String>>>,
}

/// `[sandbox]`: how `shell` commands are confined.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawSandbox {
    #[serde(default)]
    pub(crate) network: Option<Spanned<bool>>,
    #[serde(default)]
    pub(crate) memory_mb: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) processes: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) file_size_mb: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) open_files: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) tmp_mb: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) read_only: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) env: Option<Vec<Spanned<String>>>,
}

/// `[http]`: which hosts the executor kinds may reach over HTTP.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHttp {
    #[serde(default)]
    pub(crate) allow_hosts: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) max_body_bytes: Option<Spanned<u64>>,
}

/// An `[[endpoints]]` table: an external service `integrations_agent` may call.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEndpoint {
    pub(crate) name: Spanned<String>,
    #[serde(default)]
    pub(crate) method: Option<Spanned<String>>,
    pub(crate) url: Spanned<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    /// Unspanned: toml 0.8 cannot span a table written with dotted keys
    /// (`headers.Authorization.env = "TOKEN"`); an error about a header is located in the text
    /// afterwards ([`crate::error::Source::locate`]).
    #[serde(default)]
    pub(crate) headers: Option<toml::Table>,
}

/// `[executor]`: the executor's retry policy and its overrides per kind.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawExecutor {
    // The fields of [`RawRetry`], written out: `#[serde(flatten)]` would lose the spans.
    #[serde(default)]
    pub(crate) max_retries: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) initial_delay_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) max_delay_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) backoff_multiplier: Option<Spanned<f64>>,
    #[serde(default)]
    pub(crate) hard_timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) soft_timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) kinds: BTreeMap<Spanned<String>, RawRetry>,
}

impl RawExecutor {
    /// Its own retry fields.
    pub(crate) fn retry(&self) -> RawRetry {
        RawRetry {
            max_retries: self.max_retries.clone(),
            initial_delay_ms: self.initial_delay_ms.clone(),
            max_delay_ms: self.max_delay_ms.clone(),
            backoff_multiplier: self.backoff_multiplier.clone(),
            hard_timeout_ms: self.hard_timeout_ms.clone(),
            soft_timeout_ms: self.soft_timeout_ms.clone(),
        }
    }
}

/// A retry policy's fields, each optional: `[executor]`, `[executor.kinds.<kind>]` and an
/// executor's `executor_retry`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRetry {
    #[serde(default)]
    pub(crate) max_retries: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) initial_delay_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) max_delay_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) backoff_multiplier: Option<Spanned<f64>>,
    #[serde(default)]
    pub(crate) hard_timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) soft_timeout_ms: Option<Spanned<u64>>,
}

/// A `[[roles]]` table: a kind of agent the team may spawn while it works.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRole {
    pub(crate) name: Spanned<String>,
    pub(crate) layer: Spanned<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    #[serde(default)]
    pub(crate) system_prompt: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) tools: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(crate) capabilities: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) model: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) reasoner: Option<RawReasoner>,
    #[serde(default)]
    pub(crate) enabled_agents: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(crate) max_instances: Option<Spanned<u32>>,
    /// The executor kind its agents run their subtasks through (bottom roles only).
    #[serde(default)]
    pub(crate) kind: Option<Spanned<String>>,
    /// Whether its agents' commands may use the network (over `[sandbox] network`).
    #[serde(default)]
    pub(crate) network: Option<Spanned<bool>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawReasoner {
    #[serde(default)]
    pub(crate) kind: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) forbid_tools: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) prefer: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) base_url: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) model: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) stream: Option<bool>,
    #[serde(default)]
    pub(crate) api_key_env: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) request_timeout: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) max_tokens: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) structured_output: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) small_model: Option<bool>,
    #[serde(default)]
    pub(crate) plan_repairs: Option<Spanned<u32>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPrice {
    pub(crate) input_per_mtok: f64,
    pub(crate) output_per_mtok: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudget {
    #[serde(default)]
    pub(crate) max_tokens: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) max_cost_usd: Option<Spanned<f64>>,
    #[serde(default)]
    pub(crate) max_wall: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) max_calls: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) on_exceed: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConversation {
    #[serde(default)]
    pub(crate) max_turns: Option<Spanned<usize>>,
    #[serde(default)]
    pub(crate) max_chars: Option<Spanned<usize>>,
}

/// `[timeouts]`: the team's time limits, in milliseconds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTimeouts {
    #[serde(default)]
    pub(crate) tool_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) reasoning_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) silence_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) turn_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) subtask_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) task_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) tool_soft_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) turn_soft_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) task_soft_ms: Option<Spanned<u64>>,
}

/// `[approvals]`: the humans who may sign, and whether plans need one of them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawApprovals {
    #[serde(default)]
    pub(crate) humans: Option<Spanned<Vec<Spanned<String>>>>,
    #[serde(default)]
    pub(crate) plans: Option<Spanned<bool>>,
}

/// `[arbitration]`: which situations the top layer settles by a vote.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawArbitration {
    #[serde(default)]
    pub(crate) escalations: Option<bool>,
    #[serde(default)]
    pub(crate) acceptance: Option<bool>,
    #[serde(default)]
    pub(crate) vetoed_plans: Option<bool>,
}

/// `[guards]`: loops, ping-pong, no progress, wait cycles.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGuards {
    #[serde(default)]
    pub(crate) repeat_limit: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) bounce_limit: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) idle_heartbeats: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) wait_heartbeats: Option<Spanned<u32>>,
    #[serde(default)]
    pub(crate) on_stuck: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTop {
    pub(crate) id: Spanned<String>,
    #[serde(default)]
    pub(crate) name: Option<Spanned<String>>,
    pub(crate) power_type: Spanned<String>,
    #[serde(default)]
    pub(crate) vote_weight: Option<Spanned<f64>>,
    #[serde(default)]
    pub(crate) signature_authority: Option<Vec<Spanned<String>>>,
    /// Refused with a message of its own rather than as an unknown field.
    #[serde(default)]
    pub(crate) supervisor: Option<Spanned<String>>,
    /// Refused with a message of its own: only executors run a kind.
    #[serde(default)]
    pub(crate) kind: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) role: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) capabilities: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) model: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) temperature: Option<Spanned<f32>>,
    #[serde(default)]
    pub(crate) max_retries: Option<u32>,
    #[serde(default)]
    pub(crate) timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) reasoner: Option<RawReasoner>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawMid {
    pub(crate) id: Spanned<String>,
    #[serde(default)]
    pub(crate) name: Option<Spanned<String>>,
    pub(crate) domain: Spanned<String>,
    /// A top power; none for a crew's lead.
    #[serde(default)]
    pub(crate) supervisor: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) max_subordinates: Option<usize>,
    /// Refused with a message of its own: only executors run a kind.
    #[serde(default)]
    pub(crate) kind: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) role: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) capabilities: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) model: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) temperature: Option<Spanned<f32>>,
    #[serde(default)]
    pub(crate) max_retries: Option<u32>,
    #[serde(default)]
    pub(crate) timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) reasoner: Option<RawReasoner>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBottom {
    pub(crate) id: Spanned<String>,
    #[serde(default)]
    pub(crate) name: Option<Spanned<String>>,
    /// A lead; none for a single agent.
    #[serde(default)]
    pub(crate) supervisor: Option<Spanned<String>>,
    pub(crate) tools: Spanned<Vec<Spanned<String>>>,
    /// The executor kind it runs its subtasks through.
    #[serde(default)]
    pub(crate) kind: Option<Spanned<String>>,
    /// Its own executor retry policy (only with a `kind`).
    #[serde(default)]
    pub(crate) executor_retry: Option<RawRetry>,
    #[serde(default)]
    pub(crate) role: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) capabilities: Option<Vec<Spanned<String>>>,
    #[serde(default)]
    pub(crate) model: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) temperature: Option<Spanned<f32>>,
    #[serde(default)]
    pub(crate) max_retries: Option<u32>,
    #[serde(default)]
    pub(crate) timeout_ms: Option<Spanned<u64>>,
    #[serde(default)]
    pub(crate) reasoner: Option<RawReasoner>,
    /// Whether its commands may use the network (over its role's and `[sandbox] network`).
    #[serde(default)]
    pub(crate) network: Option<Spanned<bool>>,
    /// An OODA agent's configuration: the executor runs its own loop.
    #[serde(default)]
    pub(crate) ooda: Option<Spanned<toml::Table>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawPlan {
    pub(crate) id: Spanned<String>,
    pub(crate) goal: Spanned<String>,
    #[serde(default)]
    pub(crate) steps: Vec<Spanned<RawStep>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawStep {
    pub(crate) id: Spanned<String>,
    /// What the step does; required in a goal step (one without a `tool`).
    #[serde(default)]
    pub(crate) description: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) domain: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) agent: Option<Spanned<String>>,
    /// Left out in a goal step: the executor's reasoner chooses its tool calls.
    #[serde(default)]
    pub(crate) tool: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) args: Option<toml::Table>,
    #[serde(default)]
    pub(crate) after: Vec<Spanned<String>>,
    /// Running the step twice is safe: a call interrupted by a crash may run again.
    #[serde(default)]
    pub(crate) idempotent: bool,
    /// The role (a bottom role of the team) of the agent the step needs.
    #[serde(default)]
    pub(crate) role: Option<Spanned<String>>,
    /// How to tell the step is done well, in words.
    #[serde(default)]
    pub(crate) acceptance: Option<String>,
}

/// One agent of a team file, whatever its layer.
pub(crate) struct Entry<'a> {
    pub(crate) layer: AgentLayer,
    pub(crate) id: &'a Spanned<String>,
    pub(crate) name: Option<&'a Spanned<String>>,
    pub(crate) supervisor: Option<&'a Spanned<String>>,
    pub(crate) role: Option<&'a Spanned<String>>,
    pub(crate) capabilities: Option<&'a Vec<Spanned<String>>>,
    pub(crate) model: Option<&'a Spanned<String>>,
    pub(crate) temperature: Option<&'a Spanned<f32>>,
    pub(crate) max_retries: Option<u32>,
    pub(crate) timeout_ms: Option<&'a Spanned<u64>>,
    pub(crate) reasoner: Option<&'a RawReasoner>,
    /// The `kind` written on it (valid on an executor only).
    pub(crate) executor_kind: Option<&'a Spanned<String>>,
    pub(crate) kind: EntryKind<'a>,
}

pub(crate) enum EntryKind<'a> {
    Top(&'a RawTop),
    Mid(&'a RawMid),
    Bottom(&'a RawBottom),
}

impl<'a> Entry<'a> {
    pub(crate) fn top(raw: &'a RawTop) -> Self {
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
            executor_kind: raw.kind.as_ref(),
            kind: EntryKind::Top(raw),
        }
    }

    pub(crate) fn mid(raw: &'a RawMid) -> Self {
        Self {
            layer: AgentLayer::Mid,
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
            executor_kind: raw.kind.as_ref(),
            kind: EntryKind::Mid(raw),
        }
    }

    pub(crate) fn bottom(raw: &'a RawBottom) -> Self {
        Self {
            layer: AgentLayer::Bottom,
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
            executor_kind: raw.kind.as_ref(),
            kind: EntryKind::Bottom(raw),
        }
    }

    pub(crate) fn id(&self) -> &'a str {
        self.id.get_ref()
    }
}
