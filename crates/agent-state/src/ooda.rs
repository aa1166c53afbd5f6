//! The OODA agent (docs/concepts.md#ooda-agents) as plain data: its state and configuration schemas
//! (versioned, with a documented migration from the first layout), the phases and events of its
//! loop, and the rules of self-modification (the kinds of change, the four safety levels, the
//! validation each level needs, and the check that a change never widens the agent's permissions).
//!
//! Nothing here runs the loop or touches a file: `agent-ooda` does, through the runtime. Every
//! update returns a new value (immutable updates); time comes in as an argument.
//!
//! # Schema versions and the migration
//!
//! [`OodaState`] and [`OodaConfig`] are written at [`OODA_SCHEMA_VERSION`] (2). Version 1 is the
//! original design's layout, which [`OodaConfig::from_json`] and [`OodaState::from_json`] still
//! read:
//! - config: `timeout` in seconds (a float) becomes `timeout_ms`; `llm_model` becomes `model`
//!   (`llm_provider` and `llm_config` are dropped: a Strata agent's reasoner is chosen by its
//!   team); `tools` given as objects keep their `name`; the version-1 integration switches
//!   (`empirica_enabled`, `tavern_keeper_enabled`, `decision_engine_enabled`) and
//!   `custom_handlers` are dropped; `prompt` and `test_command` start empty;
//! - state: version 1's `state_version` was both the schema version and the modification
//!   counter: it becomes `state_version`, and `schema_version` is set to 2; `tools` given as
//!   objects keep their `name`; `epistemic_state` and `hero_state` are dropped; `last_updated`
//!   (a datetime string in version 1) becomes the time the caller passes.
//!
//! A document whose `schema_version` is newer than this build's is refused
//! ([`OodaSchemaError::Unsupported`]), never guessed at.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::{AgentId, Timestamp, Versioned, find_control};

/// The schema version this build writes for [`OodaState`] and [`OodaConfig`].
pub const OODA_SCHEMA_VERSION: u32 = 2;

/// The default `max_iterations`.
pub const DEFAULT_MAX_ITERATIONS: u32 = 10;

/// The most iterations a configuration may ask for.
pub const MAX_ITERATIONS: u32 = 10_000;

/// The default timeout: 300 s.
pub const DEFAULT_OODA_TIMEOUT_MS: u64 = 300_000;

/// How many messages an agent's `memory` keeps; older ones are dropped first.
pub const MAX_MEMORY: usize = 256;

/// A phase of the loop (docs/concepts.md#ooda-agents).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Look at the world: messages, the workspace.
    Observe,
    /// Choose what to do (or to stop), through the agent's reasoner.
    Decide,
    /// Do it, through the agent's tools, in the sandbox.
    Act,
    /// Learn from what happened.
    Reflect,
}

impl Phase {
    /// The four phases in loop order.
    pub const ALL: [Phase; 4] = [Phase::Observe, Phase::Decide, Phase::Act, Phase::Reflect];

    /// The wire name, such as `observe`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::Observe => "observe",
            Phase::Decide => "decide",
            Phase::Act => "act",
            Phase::Reflect => "reflect",
        }
    }

    /// The phase after this one; `reflect` is followed by the next iteration's `observe`.
    pub const fn next(self) -> Phase {
        match self {
            Phase::Observe => Phase::Decide,
            Phase::Decide => Phase::Act,
            Phase::Act => Phase::Reflect,
            Phase::Reflect => Phase::Observe,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who a message in an agent's memory comes from (the roles of a chat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageRole {
    /// The user (the task's goal).
    User,
    /// The agent itself.
    Assistant,
    /// The runtime.
    System,
    /// Another agent.
    Agent,
    /// A tool's result.
    Tool,
}

/// A message in an agent's memory, inbox or outbox.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OodaMessage {
    /// Who it comes from.
    pub role: MessageRole,
    /// What it says.
    pub content: String,
    /// The sending agent, for messages between agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<AgentId>,
    /// The receiving agent, for messages between agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<AgentId>,
    /// Anything else, such as the task it is about.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Value>,
    /// When.
    pub at: Timestamp,
}

impl OodaMessage {
    /// A message with no sender, receiver or metadata.
    pub fn new(role: MessageRole, content: impl Into<String>, at: Timestamp) -> Self {
        Self { role, content: content.into(), from: None, to: None, metadata: BTreeMap::new(), at }
    }
}

/// An OODA agent's state: the single source of truth the loop threads through its
/// phases. Each update returns a new state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OodaState {
    /// The schema version it was written with ([`OODA_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// The agent.
    pub agent_id: AgentId,
    /// Its role, such as `Senior Developer`.
    pub role: String,
    /// Its primary objective.
    pub goal: String,
    /// Conversation history, oldest first; at most [`MAX_MEMORY`] messages.
    #[serde(default)]
    pub memory: Vec<OodaMessage>,
    /// Long-term knowledge.
    #[serde(default)]
    pub knowledge: BTreeMap<String, Value>,
    /// The tools it may call, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The scratchpad of the current task.
    #[serde(default)]
    pub working_memory: BTreeMap<String, Value>,
    /// The phase it is in.
    #[serde(default)]
    pub current_step: Option<Phase>,
    /// The action decide chose, until act has run it.
    #[serde(default)]
    pub next_action: Option<String>,
    /// Messages received and not yet processed (processed at the next observe).
    #[serde(default)]
    pub inbox: Vec<OodaMessage>,
    /// Messages to send (routed by the bus at the end of the step).
    #[serde(default)]
    pub outbox: Vec<OodaMessage>,
    /// The sandbox its actions run in.
    #[serde(default)]
    pub sandbox_id: Option<String>,
    /// Bumped by every applied self-modification (and by a rollback).
    pub state_version: u64,
    /// Loop iterations completed.
    #[serde(default)]
    pub iteration: u64,
    /// When it last changed.
    pub last_updated: Timestamp,
}

impl Versioned for OodaState {
    const KIND: &'static str = "ooda_state";
    const VERSION: u32 = OODA_SCHEMA_VERSION;
}

impl OodaState {
    /// The state an agent with `config` starts in.
    pub fn new(agent_id: AgentId, config: &OodaConfig, now: Timestamp) -> Self {
        Self {
            schema_version: OODA_SCHEMA_VERSION,
            agent_id,
            role: config.role.clone(),
            goal: config.goal.clone(),
            memory: Vec::new(),
            knowledge: BTreeMap::new(),
            tools: config.tools.clone(),
            working_memory: BTreeMap::new(),
            current_step: None,
            next_action: None,
            inbox: Vec::new(),
            outbox: Vec::new(),
            sandbox_id: None,
            state_version: 1,
            iteration: 0,
            last_updated: now,
        }
    }

    /// The same state in `phase`.
    #[must_use]
    pub fn entering(&self, phase: Phase, now: Timestamp) -> Self {
        Self { current_step: Some(phase), last_updated: now, ..self.clone() }
    }

    /// The same state with `message` appended to memory (the oldest dropped past
    /// [`MAX_MEMORY`]).
    #[must_use]
    pub fn remembering(&self, message: OodaMessage) -> Self {
        let mut next = self.clone();
        next.last_updated = message.at.max(self.last_updated);
        next.memory.push(message);
        let excess = next.memory.len().saturating_sub(MAX_MEMORY);
        next.memory.drain(..excess);
        next
    }

    /// The same state with `message` waiting in the inbox.
    #[must_use]
    pub fn receiving(&self, message: OodaMessage) -> Self {
        let mut next = self.clone();
        next.inbox.push(message);
        next
    }

    /// Processes the inbox: its messages move to memory, in order;
    /// returns the new state and the messages.
    #[must_use]
    pub fn taking_inbox(&self, now: Timestamp) -> (Self, Vec<OodaMessage>) {
        let taken = self.inbox.clone();
        let mut next = Self { inbox: Vec::new(), last_updated: now, ..self.clone() };
        for message in &taken {
            next = next.remembering(message.clone());
        }
        (next, taken)
    }

    /// The same state with a message to `to` in the outbox.
    #[must_use]
    pub fn sending(&self, to: AgentId, content: impl Into<String>, now: Timestamp) -> Self {
        let mut message = OodaMessage::new(MessageRole::Agent, content, now);
        message.from = Some(self.agent_id.clone());
        message.to = Some(to);
        let mut next = self.clone();
        next.outbox.push(message);
        next.last_updated = now;
        next
    }

    /// Empties the outbox: returns the new state and the messages
    /// to route.
    #[must_use]
    pub fn taking_outbox(&self) -> (Self, Vec<OodaMessage>) {
        (Self { outbox: Vec::new(), ..self.clone() }, self.outbox.clone())
    }

    /// The same state knowing `value` under `key`.
    #[must_use]
    pub fn learning(&self, key: impl Into<String>, value: Value, now: Timestamp) -> Self {
        let mut next = self.clone();
        next.knowledge.insert(key.into(), value);
        next.last_updated = now;
        next
    }

    /// The same state one iteration further.
    #[must_use]
    pub fn iterated(&self, now: Timestamp) -> Self {
        Self {
            iteration: self.iteration + 1,
            current_step: None,
            next_action: None,
            last_updated: now,
            ..self.clone()
        }
    }

    /// The same state after an applied modification: `state_version` one higher, and the
    /// tools of the new configuration.
    #[must_use]
    pub fn modified(&self, config: &OodaConfig, now: Timestamp) -> Self {
        Self {
            state_version: self.state_version + 1,
            tools: config.tools.clone(),
            role: config.role.clone(),
            goal: config.goal.clone(),
            last_updated: now,
            ..self.clone()
        }
    }

    /// Reads a stored or hand-written state of any known schema version, migrating version 1
    /// (the first layout; see the module docs) with `now` as its `last_updated`.
    pub fn from_json(value: Value, now: Timestamp) -> Result<Self, OodaSchemaError> {
        let version = schema_version(&value)?;
        let mut value = value;
        match version {
            1 => {
                let Value::Object(map) = &mut value else {
                    return Err(OodaSchemaError::NotAnObject { what: "state" });
                };
                map.remove("epistemic_state");
                map.remove("hero_state");
                let modifications = map.get("state_version").and_then(Value::as_u64).unwrap_or(1);
                map.insert("state_version".into(), modifications.into());
                map.insert("schema_version".into(), OODA_SCHEMA_VERSION.into());
                map.insert("last_updated".into(), serde_json::to_value(now).unwrap_or_default());
                tool_names(map);
                for key in ["memory", "inbox", "outbox"] {
                    if let Some(Value::Array(messages)) = map.get_mut(key) {
                        for m in messages {
                            migrate_message(m, now);
                        }
                    }
                }
            }
            OODA_SCHEMA_VERSION => {}
            found => return Err(OodaSchemaError::Unsupported { what: "state", found }),
        }
        serde_json::from_value(value)
            .map_err(|e| OodaSchemaError::Invalid { what: "state", reason: e.to_string() })
    }
}

/// The version a document declares: `schema_version`, else version 1 (which wrote none).
fn schema_version(value: &Value) -> Result<u32, OodaSchemaError> {
    let Value::Object(map) = value else {
        return Err(OodaSchemaError::NotAnObject { what: "document" });
    };
    match map.get("schema_version") {
        None => Ok(1),
        Some(v) => {
            v.as_u64().and_then(|v| u32::try_from(v).ok()).ok_or_else(|| OodaSchemaError::Invalid {
                what: "document",
                reason: format!("`schema_version` must be a whole number, not {v}"),
            })
        }
    }
}

/// Version 1 lists tools as objects (`name`, `description`, `parameters`): keeps their names.
fn tool_names(map: &mut serde_json::Map<String, Value>) {
    if let Some(Value::Array(tools)) = map.get_mut("tools") {
        for tool in tools.iter_mut() {
            if let Some(name) = tool.get("name").cloned() {
                *tool = name;
            }
        }
    }
}

/// Version 1's messages carry a datetime `timestamp`; ours an `at`.
fn migrate_message(message: &mut Value, now: Timestamp) {
    if let Value::Object(m) = message {
        m.remove("timestamp");
        m.remove("tool_calls");
        m.remove("tool_results");
        m.entry("at").or_insert_with(|| serde_json::to_value(now).unwrap_or_default());
        if let Some(Value::Object(meta)) = m.get("metadata").cloned() {
            for (key, field) in [("from", "from"), ("to", "to")] {
                if let Some(v) = meta.get(key) {
                    m.entry(field).or_insert_with(|| v.clone());
                }
            }
        }
    }
}

/// A safety level, 1 to 4 (docs/concepts.md#self-modification).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "u8", into = "u8")]
pub struct SafetyLevel(u8);

impl SafetyLevel {
    /// Read-only: no validation.
    pub const READ_ONLY: SafetyLevel = SafetyLevel(1);
    /// Low risk: a syntax or schema check of the result.
    pub const LOW: SafetyLevel = SafetyLevel(2);
    /// Medium risk: the agent's tests pass before and after, on a copy.
    pub const MEDIUM: SafetyLevel = SafetyLevel(3);
    /// High risk: a human signs it.
    pub const HIGH: SafetyLevel = SafetyLevel(4);

    /// The level as a number.
    pub const fn get(self) -> u8 {
        self.0
    }

    /// What a change at this level must pass before it applies.
    pub const fn validation(self) -> Validation {
        match self.0 {
            1 => Validation { schema: false, tests: false, human: false },
            2 => Validation { schema: true, tests: false, human: false },
            3 => Validation { schema: true, tests: true, human: false },
            _ => Validation { schema: true, tests: true, human: true },
        }
    }
}

impl TryFrom<u8> for SafetyLevel {
    type Error = OodaSchemaError;

    fn try_from(level: u8) -> Result<Self, Self::Error> {
        if (1..=4).contains(&level) {
            Ok(SafetyLevel(level))
        } else {
            Err(OodaSchemaError::SafetyLevel { found: i64::from(level) })
        }
    }
}

impl From<SafetyLevel> for u8 {
    fn from(level: SafetyLevel) -> u8 {
        level.0
    }
}

impl fmt::Display for SafetyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The validation pipeline of a safety level. Each part includes the ones before:
/// level 3 checks the schema too; level 4 runs the tests (when the agent has a test command)
/// and then needs a human signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validation {
    /// The result must parse and validate (a config against its schema and rules, a code file
    /// by the agent's check).
    pub schema: bool,
    /// The agent's `test_command` must pass before and after the change, on a copy; a failure
    /// after rolls the change back.
    pub tests: bool,
    /// A governance decision a human signs.
    pub human: bool,
}

/// An OODA agent's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OodaConfig {
    /// The schema version it was written with ([`OODA_SCHEMA_VERSION`]).
    #[serde(default = "current_version")]
    pub schema_version: u32,
    /// Its role, such as `Senior Developer`.
    pub role: String,
    /// Its primary objective.
    pub goal: String,
    /// Personality and context, for its prompt.
    #[serde(default)]
    pub backstory: String,
    /// Extra instructions for its reasoner (a `prompt` modification changes them).
    #[serde(default)]
    pub prompt: String,
    /// The tools it may call; at most those its supervisor holds.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The model, when its reasoner is a model.
    #[serde(default)]
    pub model: Option<String>,
    /// Most loop iterations per run (default 10, 1 to [`MAX_ITERATIONS`]).
    #[serde(default = "default_iterations")]
    pub max_iterations: u32,
    /// The time one run may take, in milliseconds (default 300 000).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Verbose logs.
    #[serde(default)]
    pub verbose: bool,
    /// Whether actions run in the sandbox (default true).
    #[serde(default = "yes")]
    pub sandbox_enabled: bool,
    /// The risk its actions may carry (default 2).
    #[serde(default = "low")]
    pub safety_level: SafetyLevel,
    /// Whether it may modify itself (default false).
    #[serde(default)]
    pub self_modification_enabled: bool,
    /// The highest safety level of a change it may make to itself (default 2).
    #[serde(default = "low")]
    pub self_modification_level: SafetyLevel,
    /// The command whose success means its work is sound (level-3 validation runs it before
    /// and after a change), such as `cargo test`; run in the workspace sandbox.
    #[serde(default)]
    pub test_command: Option<String>,
    /// Behaviour settings the agent reads (a `behavior` modification changes one).
    #[serde(default)]
    pub behaviour: BTreeMap<String, Value>,
    /// Its crew, in a multi-agent run.
    #[serde(default)]
    pub crew_id: Option<String>,
    /// Retries of a failed turn before the agent fails; `None`: its team's setting. Set by a
    /// hot-swapped genome (`agent-evolution`); the runtime follows it from the next turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// One turn's time limit in milliseconds; `None`: its team's setting. Set like
    /// `max_retries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_timeout_ms: Option<u64>,
    /// The sampling temperature of its model, 0.0 to 2.0; `None`: its team's setting. Set like
    /// `max_retries`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
}

const fn current_version() -> u32 {
    OODA_SCHEMA_VERSION
}
const fn default_iterations() -> u32 {
    DEFAULT_MAX_ITERATIONS
}
const fn default_timeout() -> u64 {
    DEFAULT_OODA_TIMEOUT_MS
}
const fn yes() -> bool {
    true
}
const fn low() -> SafetyLevel {
    SafetyLevel::LOW
}

impl Versioned for OodaConfig {
    const KIND: &'static str = "ooda_config";
    const VERSION: u32 = OODA_SCHEMA_VERSION;
}

impl OodaConfig {
    /// A configuration with the defaults.
    pub fn new(role: impl Into<String>, goal: impl Into<String>) -> Self {
        Self {
            schema_version: OODA_SCHEMA_VERSION,
            role: role.into(),
            goal: goal.into(),
            backstory: String::new(),
            prompt: String::new(),
            tools: Vec::new(),
            model: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            timeout_ms: DEFAULT_OODA_TIMEOUT_MS,
            verbose: false,
            sandbox_enabled: true,
            safety_level: SafetyLevel::LOW,
            self_modification_enabled: false,
            self_modification_level: SafetyLevel::LOW,
            test_command: None,
            behaviour: BTreeMap::new(),
            crew_id: None,
            max_retries: None,
            turn_timeout_ms: None,
            temperature: None,
        }
    }

    /// Checks every rule and names the first field that breaks one.
    pub fn validate(&self) -> Result<(), OodaSchemaError> {
        let bad = |field: &'static str, reason: String| OodaSchemaError::Field { field, reason };
        if self.schema_version != OODA_SCHEMA_VERSION {
            return Err(OodaSchemaError::Unsupported {
                what: "config",
                found: self.schema_version,
            });
        }
        if self.role.trim().is_empty() {
            return Err(bad("role", "must not be empty".into()));
        }
        if self.goal.trim().is_empty() {
            return Err(bad("goal", "must not be empty".into()));
        }
        if let Some((at, c)) = find_control(&self.role) {
            return Err(bad("role", format!("holds the control character {c:?} at {at}")));
        }
        if !(1..=MAX_ITERATIONS).contains(&self.max_iterations) {
            return Err(bad(
                "max_iterations",
                format!("is {}; it must be 1 to {MAX_ITERATIONS}", self.max_iterations),
            ));
        }
        if !(1..=crate::MAX_LIMIT_MS).contains(&self.timeout_ms) {
            return Err(bad(
                "timeout_ms",
                format!("is {}; it must be 1 to {}", self.timeout_ms, crate::MAX_LIMIT_MS),
            ));
        }
        for (i, tool) in self.tools.iter().enumerate() {
            if tool.is_empty() || !tool.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(bad(
                    "tools",
                    format!("`{tool}` is not a tool name (letters, digits and `_`)"),
                ));
            }
            if self.tools[..i].contains(tool) {
                return Err(bad("tools", format!("lists `{tool}` twice")));
            }
        }
        if self.max_retries.is_some_and(|r| r > 100) {
            return Err(bad("max_retries", "must be 0 to 100".into()));
        }
        if let Some(ms) = self.turn_timeout_ms
            && !(1..=crate::MAX_LIMIT_MS).contains(&ms)
        {
            return Err(bad(
                "turn_timeout_ms",
                format!("is {ms}; it must be 1 to {}", crate::MAX_LIMIT_MS),
            ));
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Err(bad("temperature", format!("is {t}; it must be 0.0 to 2.0")));
        }
        if self.test_command.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err(bad("test_command", "is empty; leave it out instead".into()));
        }
        Ok(())
    }

    /// Reads a configuration of any known schema version (see the module docs for the
    /// migration of version 1) and validates it.
    pub fn from_json(value: Value) -> Result<Self, OodaSchemaError> {
        let mut value = value;
        match schema_version(&value)? {
            1 => {
                let Value::Object(map) = &mut value else {
                    return Err(OodaSchemaError::NotAnObject { what: "config" });
                };
                if let Some(timeout) = map.remove("timeout") {
                    let secs = timeout.as_f64().filter(|s| s.is_finite() && *s > 0.0).ok_or_else(
                        || OodaSchemaError::Field {
                            field: "timeout",
                            reason: format!("must be a positive number of seconds, not {timeout}"),
                        },
                    )?;
                    let ms = (secs * 1000.0).round();
                    if ms > crate::MAX_LIMIT_MS as f64 {
                        return Err(OodaSchemaError::Field {
                            field: "timeout",
                            reason: format!("{secs} s is longer than {} ms", crate::MAX_LIMIT_MS),
                        });
                    }
                    map.insert("timeout_ms".into(), Value::from(ms as u64));
                }
                if let Some(model) = map.remove("llm_model") {
                    map.entry("model").or_insert(model);
                }
                for dropped in [
                    "llm_provider",
                    "llm_config",
                    "empirica_enabled",
                    "tavern_keeper_enabled",
                    "decision_engine_enabled",
                    "custom_handlers",
                    "sandbox_config",
                    "agent_id",
                ] {
                    map.remove(dropped);
                }
                tool_names(map);
                map.insert("schema_version".into(), OODA_SCHEMA_VERSION.into());
            }
            OODA_SCHEMA_VERSION => {}
            found => return Err(OodaSchemaError::Unsupported { what: "config", found }),
        }
        let config: OodaConfig = serde_json::from_value(value)
            .map_err(|e| OodaSchemaError::Invalid { what: "config", reason: e.to_string() })?;
        config.validate()?;
        Ok(config)
    }
}

/// A state or configuration document that cannot be read or is not valid. Whatever held it
/// is unchanged.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum OodaSchemaError {
    /// Not a JSON object.
    #[error("the OODA {what} must be a JSON object")]
    NotAnObject {
        /// `state`, `config` or `document`.
        what: &'static str,
    },
    /// A schema version this build does not know.
    #[error(
        "the OODA {what} has schema version {found}; this build reads versions 1 and {OODA_SCHEMA_VERSION} (a newer Strata wrote it?)"
    )]
    Unsupported {
        /// `state` or `config`.
        what: &'static str,
        /// The version found.
        found: u32,
    },
    /// It does not match the schema.
    #[error("the OODA {what} does not match its schema: {reason}")]
    Invalid {
        /// `state` or `config`.
        what: &'static str,
        /// What the parser said.
        reason: String,
    },
    /// A field breaks a rule.
    #[error("field `{field}` {reason}")]
    Field {
        /// The field.
        field: &'static str,
        /// What is wrong, in words.
        reason: String,
    },
    /// A safety level outside 1 to 4.
    #[error("safety level {found} does not exist; levels are 1 (read-only) to 4 (a human signs)")]
    SafetyLevel {
        /// The level given.
        found: i64,
    },
}

/// What a modification changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModificationType {
    /// A file of the agent's code in the workspace: `target` is its path, `change` is
    /// `{"content": ...}` or `{"replace": {"old": ..., "new": ...}}`.
    Code,
    /// A configuration field: `target` is the field, `change` is `{"value": ...}`.
    Config,
    /// The agent's prompt: `change` is `{"text": ...}` or `{"append": ...}`.
    Prompt,
    /// The agent's set of tools: `change` is `{"add": [...]}` or `{"remove": [...]}`.
    Architecture,
    /// One behaviour setting: `target` is its key, `change` is `{"value": ...}`.
    #[serde(alias = "behaviour")]
    Behavior,
}

impl ModificationType {
    /// Every type, by wire name.
    pub const ALL: [ModificationType; 5] = [
        ModificationType::Code,
        ModificationType::Config,
        ModificationType::Prompt,
        ModificationType::Architecture,
        ModificationType::Behavior,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            ModificationType::Code => "code",
            ModificationType::Config => "config",
            ModificationType::Prompt => "prompt",
            ModificationType::Architecture => "architecture",
            ModificationType::Behavior => "behavior",
        }
    }
}

impl fmt::Display for ModificationType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A self-modification request (docs/concepts.md#self-modification).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Modification {
    /// What it changes.
    pub modification_type: ModificationType,
    /// Where: a file path, a config field, a behaviour key (see [`ModificationType`]).
    pub target: String,
    /// The change itself.
    pub change: Value,
    /// Its risk, 1 to 4: it decides the validation ([`SafetyLevel::validation`]).
    pub safety_level: SafetyLevel,
    /// The version-1 switch; Strata validates every change by its level whatever it says (a change
    /// cannot opt out of its level's checks), and records it.
    #[serde(default = "yes")]
    pub validation_required: bool,
}

impl Modification {
    /// Reads a modification, with an error in words for an unknown type or a level outside 1
    /// to 4.
    pub fn parse(value: &Value) -> Result<Self, ModificationError> {
        let Value::Object(map) = value else {
            return Err(ModificationError::Malformed("a modification is a JSON object".into()));
        };
        match map.get("modification_type") {
            Some(Value::String(t))
                if !ModificationType::ALL.iter().any(|k| k.as_str() == t) && t != "behaviour" =>
            {
                return Err(ModificationError::UnknownType { found: t.clone() });
            }
            Some(Value::String(_)) => {}
            Some(other) => {
                return Err(ModificationError::Malformed(format!(
                    "`modification_type` must be a string, not {other}"
                )));
            }
            None => {
                return Err(ModificationError::Malformed("`modification_type` is missing".into()));
            }
        }
        match map.get("safety_level") {
            Some(level) => match level.as_i64() {
                Some(l) if (1..=4).contains(&l) => {}
                Some(l) => {
                    return Err(ModificationError::Level(OodaSchemaError::SafetyLevel {
                        found: l,
                    }));
                }
                None => {
                    return Err(ModificationError::Malformed(format!(
                        "`safety_level` must be a whole number 1 to 4, not {level}"
                    )));
                }
            },
            None => return Err(ModificationError::Malformed("`safety_level` is missing".into())),
        }
        let modification: Modification = serde_json::from_value(value.clone())
            .map_err(|e| ModificationError::Malformed(e.to_string()))?;
        if modification.target.trim().is_empty()
            && modification.modification_type != ModificationType::Prompt
        {
            return Err(ModificationError::Malformed("`target` must not be empty".into()));
        }
        Ok(modification)
    }

    /// Whether `config` allows this change at all: self-modification enabled, and its level
    /// within the agent's `self_modification_level`.
    pub fn allowed_by(&self, config: &OodaConfig) -> Result<(), ModificationError> {
        if !config.self_modification_enabled {
            return Err(ModificationError::Disabled);
        }
        if self.safety_level > config.self_modification_level {
            return Err(ModificationError::AboveLevel {
                level: self.safety_level,
                allowed: config.self_modification_level,
            });
        }
        Ok(())
    }

    /// An architecture change: tools added and removed.
    fn change_tools(&self, next: &mut OodaConfig) -> Result<(), ModificationError> {
        let names = |key: &str| -> Result<Vec<String>, ModificationError> {
            match self.change.get(key) {
                None => Ok(Vec::new()),
                Some(v) => serde_json::from_value(v.clone()).map_err(|_| {
                    ModificationError::Malformed(format!("`{key}` must be a list of tool names"))
                }),
            }
        };
        let (add, remove) = (names("add")?, names("remove")?);
        if add.is_empty() && remove.is_empty() {
            return Err(ModificationError::Malformed(
                "an architecture change is {\"add\": [...]} and/or {\"remove\": [...]}".into(),
            ));
        }
        next.tools.retain(|t| !remove.contains(t));
        for tool in add {
            if !next.tools.contains(&tool) {
                next.tools.push(tool);
            }
        }
        Ok(())
    }

    /// A config change: one field of the configuration (not one that bounds the agent's own
    /// permissions) set to a new value.
    fn change_config(&self, next: &OodaConfig) -> Result<OodaConfig, ModificationError> {
        let value = self.change.get("value").cloned().ok_or_else(|| {
            ModificationError::Malformed("a config change is {\"value\": ...}".into())
        })?;
        if PROTECTED_FIELDS.contains(&self.target.as_str()) {
            return Err(ModificationError::WidensPermissions {
                what: format!(
                    "`{}` bounds what the agent may do; only its supervisor changes it",
                    self.target
                ),
            });
        }
        let mut doc =
            serde_json::to_value(next).map_err(|e| ModificationError::Malformed(e.to_string()))?;
        let Some(map) = doc.as_object_mut() else {
            return Err(ModificationError::Malformed("the config is not an object".into()));
        };
        if !map.contains_key(&self.target) {
            return Err(ModificationError::NoSuchTarget { target: self.target.clone() });
        }
        map.insert(self.target.clone(), value);
        serde_json::from_value(doc).map_err(|e| {
            ModificationError::Invalid(OodaSchemaError::Invalid {
                what: "config",
                reason: e.to_string(),
            })
        })
    }

    /// The configuration after this change, for the types that change the configuration
    /// (config, prompt, architecture, behaviour), validated against its rules. `ceiling` is
    /// what the agent's supervisor holds: the new tools must be among them. A field that
    /// bounds the agent's own permissions (its safety and self-modification settings, its
    /// sandbox) cannot be changed by the agent. `None` for a code change.
    pub fn apply_to(
        &self,
        config: &OodaConfig,
        ceiling: &[String],
    ) -> Result<Option<OodaConfig>, ModificationError> {
        let mut next = config.clone();
        match self.modification_type {
            ModificationType::Code => return Ok(None),
            ModificationType::Prompt => {
                if let Some(text) = self.change.get("text").and_then(Value::as_str) {
                    next.prompt = text.to_owned();
                } else if let Some(more) = self.change.get("append").and_then(Value::as_str) {
                    if !next.prompt.is_empty() {
                        next.prompt.push('\n');
                    }
                    next.prompt.push_str(more);
                } else {
                    return Err(ModificationError::Malformed(
                        "a prompt change is {\"text\": ...} or {\"append\": ...}".into(),
                    ));
                }
            }
            ModificationType::Behavior => {
                let value = self.change.get("value").cloned().ok_or_else(|| {
                    ModificationError::Malformed("a behavior change is {\"value\": ...}".into())
                })?;
                next.behaviour.insert(self.target.clone(), value);
            }
            ModificationType::Architecture => self.change_tools(&mut next)?,
            ModificationType::Config => next = self.change_config(&next)?,
        }
        if let Some(tool) = next.tools.iter().find(|t| !ceiling.contains(t)) {
            return Err(ModificationError::WidensPermissions {
                what: format!(
                    "the tool `{tool}` is not one its supervisor holds (it holds: {})",
                    ceiling.join(", ")
                ),
            });
        }
        next.validate().map_err(ModificationError::Invalid)?;
        Ok(Some(next))
    }
}

/// The configuration fields a modification may never change: they bound the agent's own
/// permissions.
pub const PROTECTED_FIELDS: [&str; 5] = [
    "safety_level",
    "self_modification_enabled",
    "self_modification_level",
    "sandbox_enabled",
    "schema_version",
];

/// Applies a code change to a file's text: `{"content": ...}` replaces it, `{"replace": {"old":
/// ..., "new": ...}}` replaces the one occurrence of `old`.
pub fn apply_code_change(text: &str, change: &Value) -> Result<String, ModificationError> {
    if let Some(content) = change.get("content").and_then(Value::as_str) {
        return Ok(content.to_owned());
    }
    let replace = change.get("replace").ok_or_else(|| {
        ModificationError::Malformed(
            "a code change is {\"content\": ...} or {\"replace\": {\"old\": ..., \"new\": ...}}"
                .into(),
        )
    })?;
    let (Some(old), Some(new)) =
        (replace.get("old").and_then(Value::as_str), replace.get("new").and_then(Value::as_str))
    else {
        return Err(ModificationError::Malformed("`replace` needs `old` and `new` strings".into()));
    };
    match text.matches(old).count() {
        1 => Ok(text.replacen(old, new, 1)),
        0 => Err(ModificationError::NoSuchTarget { target: format!("the text `{old}`") }),
        n => Err(ModificationError::Malformed(format!(
            "`{old}` occurs {n} times; make `old` unique"
        ))),
    }
}

/// A refused self-modification. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ModificationError {
    /// Not a valid modification.
    #[error("malformed modification: {0}")]
    Malformed(String),
    /// An unknown `modification_type`.
    #[error(
        "unknown modification type `{found}`; the types are code, config, prompt, architecture and behavior"
    )]
    UnknownType {
        /// What was given.
        found: String,
    },
    /// A level outside 1 to 4.
    #[error(transparent)]
    Level(OodaSchemaError),
    /// Self-modification is off for this agent.
    #[error(
        "self-modification is disabled for this agent; its supervisor enables it with `self_modification_enabled`"
    )]
    Disabled,
    /// The change is riskier than the agent may make.
    #[error("modification at safety level {level} exceeds this agent's allowed level {allowed}")]
    AboveLevel {
        /// The change's level.
        level: SafetyLevel,
        /// The agent's `self_modification_level`.
        allowed: SafetyLevel,
    },
    /// The target does not exist.
    #[error("modification target {target} does not exist")]
    NoSuchTarget {
        /// The target.
        target: String,
    },
    /// The result would give the agent more than its supervisor holds.
    #[error("modification refused: it would widen the agent's permissions: {what}")]
    WidensPermissions {
        /// What, in words.
        what: String,
    },
    /// The result fails validation.
    #[error("modification fails validation: {0}")]
    Invalid(OodaSchemaError),
}

/// What an OODA event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OodaEventKind {
    /// Observe began.
    Observe,
    /// Decide began.
    Decide,
    /// Act began.
    Act,
    /// Reflect began.
    Reflect,
    /// A phase failed.
    Error,
    /// A self-modification was applied, refused, rolled back or is waiting for a human.
    ModifySelf,
}

impl From<Phase> for OodaEventKind {
    fn from(phase: Phase) -> Self {
        match phase {
            Phase::Observe => OodaEventKind::Observe,
            Phase::Decide => OodaEventKind::Decide,
            Phase::Act => OodaEventKind::Act,
            Phase::Reflect => OodaEventKind::Reflect,
        }
    }
}

/// One event of an OODA agent's loop, streamed to the caller as it
/// happens and kept in the run's audit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OodaEvent {
    /// What.
    pub kind: OodaEventKind,
    /// The agent.
    pub agent_id: AgentId,
    /// The loop iteration.
    pub iteration: u64,
    /// The agent's state version at the time.
    pub state_version: u64,
    /// Details: the action chosen, an error, a modification's hashes.
    #[serde(default)]
    pub data: Value,
    /// When.
    pub at: Timestamp,
}

/// Why an OODA agent's loop stopped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum StopReason {
    /// Decide said the goal is reached (or there is nothing more to do).
    Finished {
        /// Its words.
        summary: String,
    },
    /// `max_iterations` loops ran.
    MaxIterations {
        /// The limit.
        limit: u32,
    },
    /// A phase failed for good.
    Failed {
        /// The phase.
        phase: Phase,
        /// The error.
        error: String,
    },
    /// A guard every working agent runs inside stopped it: it was about to repeat itself
    /// ([`TaskFailure::Loop`](crate::TaskFailure::Loop)), or its lead's step ran out of time
    /// ([`TaskFailure::TimedOut`](crate::TaskFailure::TimedOut)).
    Stuck {
        /// The typed reason.
        failure: crate::TaskFailure,
    },
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Finished { summary } => write!(f, "finished: {summary}"),
            StopReason::MaxIterations { limit } => {
                write!(f, "stopped after {limit} iterations (max_iterations); raise it to go on")
            }
            StopReason::Failed { phase, error } => write!(f, "{phase} failed: {error}"),
            StopReason::Stuck { failure } => write!(f, "{failure}"),
        }
    }
}

/// The call by which an OODA agent's decide asks for a self-modification: its arguments are a
/// [`Modification`].
pub const MODIFY_SELF: &str = "modify_self";

/// The call by which an OODA agent's decide sends a message to another agent.
pub const SEND_MESSAGE: &str = "send_message";

/// How a reasoner offers one of an OODA agent's own calls as a tool: its name, what it does,
/// and the JSON schema of its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct CallSpec {
    /// The call.
    pub name: &'static str,
    /// What it does, for a model.
    pub description: &'static str,
    /// The JSON schema of its arguments.
    pub parameters: Value,
}

/// The spec of [`MODIFY_SELF`] or [`SEND_MESSAGE`]; `None` for any other name.
pub fn call_spec(name: &str) -> Option<CallSpec> {
    match name {
        MODIFY_SELF => Some(CallSpec {
            name: MODIFY_SELF,
            description: "Change yourself: your prompt, a config field, a behavior setting, your \
                          tools (only among those your supervisor granted) or a file of your code. \
                          The change is validated by its safety level (1 none, 2 a schema check, \
                          3 your tests before and after, 4 a human signs) and becomes a new version.",
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "modification_type": {"type": "string", "enum": ["code", "config", "prompt", "architecture", "behavior"]},
                    "target": {"type": "string", "description": "a file path, a config field or a behavior key"},
                    "change": {"type": "object", "description": "{\"text\"|\"append\": ...} for prompt, {\"value\": ...} for config and behavior, {\"add\"|\"remove\": [...]} for architecture, {\"content\": ...} or {\"replace\": {\"old\", \"new\"}} for code"},
                    "safety_level": {"type": "integer", "minimum": 1, "maximum": 4}
                },
                "required": ["modification_type", "target", "change", "safety_level"]
            }),
        }),
        SEND_MESSAGE => Some(CallSpec {
            name: SEND_MESSAGE,
            description: "Send a message to another agent; its answer reaches you at your next step.",
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "the agent's id"},
                    "content": {"type": "string", "minLength": 1}
                },
                "required": ["to", "content"]
            }),
        }),
        _ => None,
    }
}
