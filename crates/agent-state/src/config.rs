//! Agent configuration and its validation.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::{AgentId, AgentLayer, Capability, Versioned};

/// Retries per agent before it goes `failed`.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// Task timeout in milliseconds.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
/// Longest agent id accepted, so ids stay usable as storage keys and bus subjects.
pub const MAX_AGENT_ID_LEN: usize = 64;

/// One agent's configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentConfig {
    /// Unique id: ASCII letters, digits, `-` and `_`, at most 64 characters.
    pub id: AgentId,
    /// Display name.
    pub name: String,
    /// Layer.
    pub layer: AgentLayer,
    /// Role description, used in the system prompt.
    #[serde(default)]
    pub role: String,
    /// Supervisor: required for mid and bottom agents, forbidden for top agents.
    #[serde(default)]
    pub supervisor: Option<AgentId>,
    /// Subordinates: forbidden on bottom agents.
    #[serde(default)]
    pub subordinates: Vec<AgentId>,
    /// Capabilities; each must be allowed for the layer (docs/concepts.md#capabilities). By default
    /// every capability the layer allows, borrowed from [`AgentLayer::default_capabilities`].
    pub capabilities: Cow<'static, [Capability]>,
    /// Model name for an LLM reasoner, if any.
    #[serde(default)]
    pub model: Option<String>,
    /// Sampling temperature for an LLM reasoner, 0.0 to 2.0.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// Retries before the agent goes `failed`.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Task timeout in milliseconds; must be positive.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
}

fn default_max_retries() -> u32 {
    DEFAULT_MAX_RETRIES
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

impl Versioned for AgentConfig {
    const KIND: &'static str = "agent_config";
    const VERSION: u32 = 1;
}

impl AgentConfig {
    /// A configuration with the layer's full capability set and the default limits.
    pub fn new(id: impl Into<AgentId>, name: impl Into<String>, layer: AgentLayer) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            layer,
            role: String::new(),
            supervisor: None,
            subordinates: Vec::new(),
            capabilities: Cow::Borrowed(layer.default_capabilities()),
            model: None,
            temperature: None,
            max_retries: DEFAULT_MAX_RETRIES,
            timeout_ms: DEFAULT_TIMEOUT_MS,
        }
    }

    /// Sets the role description.
    pub fn with_role(mut self, role: impl Into<String>) -> Self {
        self.role = role.into();
        self
    }

    /// Sets the supervisor.
    pub fn with_supervisor(mut self, supervisor: impl Into<AgentId>) -> Self {
        self.supervisor = Some(supervisor.into());
        self
    }

    /// Sets the subordinates.
    pub fn with_subordinates<I, A>(mut self, subordinates: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<AgentId>,
    {
        self.subordinates = subordinates.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the capabilities.
    pub fn with_capabilities(mut self, capabilities: impl IntoIterator<Item = Capability>) -> Self {
        self.capabilities = Cow::Owned(capabilities.into_iter().collect());
        self
    }

    /// Sets the retry limit.
    pub fn with_max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets the task timeout.
    pub fn with_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.timeout_ms = timeout_ms;
        self
    }

    /// Whether the agent holds `capability`.
    pub fn has(&self, capability: Capability) -> bool {
        self.capabilities.contains(&capability)
    }

    /// Checks every rule and reports the first violation, naming the field. A lead or an
    /// executor without a supervisor is valid here: it is the agent a crew's or a single
    /// agent's team hands its tasks to; whether a team may have one is the team's check
    /// (`agent_pool::TeamShape`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |kind| Err(ConfigError { agent: self.id.as_str().to_owned(), kind });
        let model = self.model.as_deref().unwrap_or_default();
        if let Err(kind) = check_agent_id(self.id.as_str()) {
            return err(kind);
        }
        if self.name.trim().is_empty() {
            return err(ConfigErrorKind::EmptyName);
        }
        for (field, value) in
            [("name", self.name.as_str()), ("role", self.role.as_str()), ("model", model)]
        {
            if let Some((index, character)) = find_control(value) {
                return err(ConfigErrorKind::ControlCharacter { field, index, character });
            }
        }
        if let Some(&capability) = self.capabilities.iter().find(|c| !self.layer.allows(**c)) {
            return err(ConfigErrorKind::CapabilityNotAllowed { capability, layer: self.layer });
        }
        match (&self.supervisor, self.layer) {
            (Some(supervisor), AgentLayer::Top) => {
                return err(ConfigErrorKind::TopWithSupervisor {
                    supervisor: supervisor.to_string(),
                });
            }
            (Some(supervisor), _) if *supervisor == self.id => {
                return err(ConfigErrorKind::SupervisesItself);
            }
            (Some(supervisor), _) if check_agent_id(supervisor.as_str()).is_err() => {
                return err(ConfigErrorKind::InvalidReference {
                    field: "supervisor",
                    id: supervisor.to_string(),
                });
            }
            _ => {}
        }
        if self.layer == AgentLayer::Bottom && !self.subordinates.is_empty() {
            return err(ConfigErrorKind::SubordinatesOnBottom { count: self.subordinates.len() });
        }
        if self.subordinates.contains(&self.id) {
            return err(ConfigErrorKind::SupervisesItself);
        }
        for (i, sub) in self.subordinates.iter().enumerate() {
            if check_agent_id(sub.as_str()).is_err() {
                return err(ConfigErrorKind::InvalidReference {
                    field: "subordinates",
                    id: sub.to_string(),
                });
            }
            if self.subordinates[..i].contains(sub) {
                return err(ConfigErrorKind::DuplicateSubordinate { subordinate: sub.to_string() });
            }
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return err(ConfigErrorKind::TemperatureOutOfRange { value: t });
        }
        if self.timeout_ms == 0 {
            return err(ConfigErrorKind::ZeroTimeout);
        }
        Ok(())
    }
}

/// Checks that `id` can name an agent: not empty, not reserved, at most 64 characters of
/// ASCII letters, digits, `-` and `_`.
pub fn check_agent_id(id: &str) -> Result<(), ConfigErrorKind> {
    if id.is_empty() {
        return Err(ConfigErrorKind::EmptyId);
    }
    if id == crate::SYSTEM || id == crate::BROADCAST || id == crate::GLOBAL_BOARD {
        return Err(ConfigErrorKind::ReservedId { id: id.to_owned() });
    }
    if id.len() > MAX_AGENT_ID_LEN || !id.bytes().all(|b| ID_BYTES[usize::from(b)]) {
        return Err(ConfigErrorKind::InvalidId { id: id.to_owned() });
    }
    Ok(())
}

/// The bytes an agent id may hold: ASCII letters, digits, `-` and `_` (a table, as every agent
/// created checks its id and its supervisor's, and its inbox and board check it again).
const ID_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let byte = b as u8;
        table[b] = byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_';
        b += 1;
    }
    table
};

/// The first control character in `text` and its index in characters (0-based): C0 and C1
/// controls (newline, tab, escape, ...), DEL, and the Unicode line and paragraph separators.
/// Ids and names must not hold one: printed, it would split a line or drive the terminal.
pub fn find_control(text: &str) -> Option<(usize, char)> {
    // Printable ASCII, the common case, holds none: one pass over the bytes.
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    text.chars().enumerate().find(|(_, c)| is_control(*c))
}

/// Whether `c` is refused in ids and names by [`find_control`].
pub fn is_control(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// An invalid configuration: which agent, and what is wrong.
#[derive(Clone, Debug, PartialEq, Error)]
#[error("agent `{agent}`: {kind}")]
pub struct ConfigError {
    /// The agent id as written (may be empty).
    pub agent: String,
    /// What is wrong.
    pub kind: ConfigErrorKind,
}

impl ConfigError {
    /// The configuration field at fault.
    pub fn field(&self) -> &'static str {
        self.kind.field()
    }
}

/// What is wrong with a configuration. Each message names the field and what to do.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum ConfigErrorKind {
    /// `id` is empty.
    #[error("field `id` must not be empty")]
    EmptyId,
    /// `id` is a reserved address.
    #[error("field `id`: `{id}` is reserved; choose another id")]
    ReservedId {
        /// The id.
        id: String,
    },
    /// `id` has characters outside the allowed set or is too long.
    #[error("field `id`: `{id}` must be 1 to 64 ASCII letters, digits, `-` or `_`")]
    InvalidId {
        /// The id.
        id: String,
    },
    /// `name` is empty or blank.
    #[error("field `name` must not be empty")]
    EmptyName,
    /// A capability the layer may not hold.
    #[error(
        "field `capabilities`: a {layer} agent may not hold `{capability}` (allowed: {})",
        layer.capabilities().map(|c| c.as_str()).collect::<Vec<_>>().join(", ")
    )]
    CapabilityNotAllowed {
        /// The capability.
        capability: Capability,
        /// The agent's layer.
        layer: AgentLayer,
    },
    /// A top agent with a supervisor.
    #[error("field `supervisor`: a top agent has no supervisor, remove `{supervisor}`")]
    TopWithSupervisor {
        /// The supervisor given.
        supervisor: String,
    },
    /// The agent names itself as supervisor or subordinate.
    #[error("field `supervisor`/`subordinates`: an agent cannot supervise itself")]
    SupervisesItself,
    /// A bottom agent with subordinates.
    #[error("field `subordinates`: a bottom agent cannot have subordinates ({count} given)")]
    SubordinatesOnBottom {
        /// How many were given.
        count: usize,
    },
    /// A supervisor or subordinate id that cannot name an agent.
    #[error(
        "field `{field}`: `{id}` cannot name an agent (reserved, empty, or not 1 to 64 ASCII letters, digits, `-` or `_`)"
    )]
    InvalidReference {
        /// `supervisor` or `subordinates`.
        field: &'static str,
        /// The id given.
        id: String,
    },
    /// The same subordinate twice.
    #[error("field `subordinates`: `{subordinate}` is listed twice")]
    DuplicateSubordinate {
        /// The repeated id.
        subordinate: String,
    },
    /// Temperature outside 0.0..=2.0.
    #[error("field `temperature`: {value} is outside 0.0 to 2.0")]
    TemperatureOutOfRange {
        /// The value given.
        value: f32,
    },
    /// A zero timeout.
    #[error("field `timeout_ms` must be greater than 0")]
    ZeroTimeout,
    /// A control character (newline, tab, escape, ...) in a name, the role or the model.
    #[error(
        "field `{field}`: character {} is the control character {}; write it on one line of \
         printable text",
        .index + 1,
        .character.escape_unicode()
    )]
    ControlCharacter {
        /// `name`, `role` or `model`.
        field: &'static str,
        /// Its index in characters, 0-based.
        index: usize,
        /// The character.
        character: char,
    },
}

impl ConfigErrorKind {
    /// The configuration field at fault.
    pub fn field(&self) -> &'static str {
        match self {
            ConfigErrorKind::EmptyId
            | ConfigErrorKind::ReservedId { .. }
            | ConfigErrorKind::InvalidId { .. } => "id",
            ConfigErrorKind::EmptyName => "name",
            ConfigErrorKind::CapabilityNotAllowed { .. } => "capabilities",
            ConfigErrorKind::TopWithSupervisor { .. } | ConfigErrorKind::SupervisesItself => {
                "supervisor"
            }
            ConfigErrorKind::SubordinatesOnBottom { .. }
            | ConfigErrorKind::DuplicateSubordinate { .. } => "subordinates",
            ConfigErrorKind::TemperatureOutOfRange { .. } => "temperature",
            ConfigErrorKind::InvalidReference { field, .. } => field,
            ConfigErrorKind::ZeroTimeout => "timeout_ms",
            ConfigErrorKind::ControlCharacter { field, .. } => field,
        }
    }
}
