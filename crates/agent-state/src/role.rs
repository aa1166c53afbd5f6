//! Roles (docs/concepts.md#roles-and-spawning): the kinds of agent a team may create while it
//! works, what each holds, and which roles each may spawn.
//!
//! A [`RoleBook`] is checked once, when it is built: every role it enables exists, no role
//! enables one of a higher layer, and each role's tools and capabilities are allowed for its
//! layer (docs/concepts.md#capabilities). Spawning then only asks [`RoleBook::may_spawn`].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{AgentLayer, Capability};

/// The depth of the spawn tree past which `spawn_agent` is refused, by default: a top power's
/// lead is depth 1, what that lead spawns depth 2, and so on.
pub const DEFAULT_MAX_SPAWN_DEPTH: u32 = 3;

/// One role.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Role {
    /// Unique name, such as `test_writer`: what `spawn_agent` names.
    pub name: String,
    /// The layer an agent of this role is on (mid or bottom).
    pub layer: AgentLayer,
    /// What the role is for, in words: shown to whoever may spawn it.
    #[serde(default)]
    pub description: String,
    /// The system prompt of an agent of this role, if not the layer's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// The workspace tools an agent of this role holds (bottom roles only).
    #[serde(default)]
    pub tools: Vec<String>,
    /// Its capabilities; `None`: every capability its layer allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<Capability>>,
    /// The model its reasoner uses, if a particular one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The roles an agent of this role may spawn; empty (the default): none.
    #[serde(default)]
    pub enabled_agents: Vec<String>,
    /// Most agents of this role alive at once in the team; `None`: only the pool's limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
    /// The executor kind (such as `research_agent`) an agent of this role runs its
    /// subtasks through (bottom roles only); `None`: its reasoner's tool loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl Role {
    /// A role on `layer` with nothing enabled and no tools.
    pub fn new(name: impl Into<String>, layer: AgentLayer) -> Self {
        Self {
            name: name.into(),
            layer,
            description: String::new(),
            system_prompt: None,
            tools: Vec::new(),
            capabilities: None,
            model: None,
            enabled_agents: Vec::new(),
            max_instances: None,
            kind: None,
        }
    }

    /// The capabilities an agent of this role holds.
    pub fn capabilities(&self) -> Vec<Capability> {
        match &self.capabilities {
            Some(c) => c.clone(),
            None => self.layer.capabilities().collect(),
        }
    }

    /// Whether it may spawn any role.
    pub fn supervises(&self) -> bool {
        !self.enabled_agents.is_empty()
    }
}

/// A role that cannot be part of a team, and what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RoleError {
    /// A role without a name, or with characters that are not letters, digits, `-` or `_`.
    #[error(
        "role name `{name}` is not valid: use 1 to 40 ASCII letters, digits, `-` and `_` (it becomes part of agent ids)"
    )]
    BadName {
        /// The name.
        name: String,
    },
    /// Two roles share a name.
    #[error("role `{role}` is defined twice; role names must be unique")]
    Duplicate {
        /// The name.
        role: String,
    },
    /// A top-layer role: the powers are the team's fixed top layer.
    #[error(
        "role `{role}` is on the top layer; roles are for the mid and bottom layers (the top powers are listed as agents)"
    )]
    TopRole {
        /// The role.
        role: String,
    },
    /// A role enables a role that does not exist.
    #[error("role `{role}` enables `{enabled}`, which is not a role (known roles: {known})")]
    UnknownRole {
        /// The role.
        role: String,
        /// The missing role.
        enabled: String,
        /// The roles that exist.
        known: String,
    },
    /// A role enables a role of a higher layer.
    #[error(
        "role `{role}` ({layer}) enables `{enabled}`, a {enabled_layer} role; a role may only enable roles of its own layer or below"
    )]
    EnablesHigherLayer {
        /// The role.
        role: String,
        /// Its layer.
        layer: AgentLayer,
        /// The role it enables.
        enabled: String,
        /// That role's layer.
        enabled_layer: AgentLayer,
    },
    /// A role enables roles but its layer may not delegate (§7.1: the bottom layer).
    #[error(
        "role `{role}` ({layer}) enables roles, but the {layer} layer may not hold `delegate`; only mid roles may spawn agents"
    )]
    CannotDelegate {
        /// The role.
        role: String,
        /// Its layer.
        layer: AgentLayer,
    },
    /// A capability its layer may not hold.
    #[error("role `{role}` ({layer}) holds `{capability}`, which the {layer} layer may not hold")]
    CapabilityNotAllowed {
        /// The role.
        role: String,
        /// Its layer.
        layer: AgentLayer,
        /// The capability.
        capability: Capability,
    },
    /// Tools on a layer that may not call tools.
    #[error(
        "role `{role}` ({layer}) lists tools, but the {layer} layer may not hold `tool_call`; give tools to bottom roles"
    )]
    ToolsNotAllowed {
        /// The role.
        role: String,
        /// Its layer.
        layer: AgentLayer,
    },
    /// An executor kind on a role that is not on the bottom layer.
    #[error("role `{role}` ({layer}) has a `kind`; only bottom roles run an executor kind")]
    KindNotAllowed {
        /// The role.
        role: String,
        /// Its layer.
        layer: AgentLayer,
    },
    /// `max_instances` of zero.
    #[error("role `{role}` has `max_instances = 0`; leave it out for no limit, or give 1 or more")]
    ZeroInstances {
        /// The role.
        role: String,
    },
}

/// Every role of a team, checked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleBook {
    roles: BTreeMap<String, Role>,
}

impl RoleBook {
    /// Checks `roles` and keeps them by name; the first role in error is reported.
    pub fn new(roles: impl IntoIterator<Item = Role>) -> Result<Self, RoleError> {
        let mut book = BTreeMap::new();
        for role in roles {
            check_role_name(&role.name)?;
            if book.contains_key(&role.name) {
                return Err(RoleError::Duplicate { role: role.name });
            }
            book.insert(role.name.clone(), role);
        }
        for role in book.values() {
            check_role(role, &book)?;
        }
        Ok(Self { roles: book })
    }

    /// The role called `name`.
    pub fn get(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    /// Every role, by name.
    pub fn roles(&self) -> impl Iterator<Item = &Role> {
        self.roles.values()
    }

    /// The roles of `layer`.
    pub fn of_layer(&self, layer: AgentLayer) -> impl Iterator<Item = &Role> {
        self.roles.values().filter(move |r| r.layer == layer)
    }

    /// No roles.
    pub fn is_empty(&self) -> bool {
        self.roles.is_empty()
    }

    /// The role names, comma-separated (for messages).
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.roles.keys().map(String::as_str).collect();
        if names.is_empty() { "none".into() } else { names.join(", ") }
    }

    /// Whether an agent of role `parent` may spawn one of role `child`.
    pub fn may_spawn(&self, parent: &str, child: &str) -> bool {
        self.roles.get(parent).is_some_and(|p| p.enabled_agents.iter().any(|e| e == child))
    }
}

/// Checks a role name: 1 to 40 ASCII letters, digits, `-` and `_`.
pub fn check_role_name(name: &str) -> Result<(), RoleError> {
    let ok = !name.is_empty()
        && name.len() <= 40
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok { Ok(()) } else { Err(RoleError::BadName { name: name.to_owned() }) }
}

fn check_role(role: &Role, book: &BTreeMap<String, Role>) -> Result<(), RoleError> {
    let name = || role.name.clone();
    if role.layer == AgentLayer::Top {
        return Err(RoleError::TopRole { role: name() });
    }
    if role.max_instances == Some(0) {
        return Err(RoleError::ZeroInstances { role: name() });
    }
    if let Some(capability) = role.capabilities().into_iter().find(|c| !role.layer.allows(*c)) {
        return Err(RoleError::CapabilityNotAllowed {
            role: name(),
            layer: role.layer,
            capability,
        });
    }
    if !role.tools.is_empty() && !role.layer.allows(Capability::ToolCall) {
        return Err(RoleError::ToolsNotAllowed { role: name(), layer: role.layer });
    }
    if role.kind.is_some() && role.layer != AgentLayer::Bottom {
        return Err(RoleError::KindNotAllowed { role: name(), layer: role.layer });
    }
    if role.supervises() && !role.layer.allows(Capability::Delegate) {
        return Err(RoleError::CannotDelegate { role: name(), layer: role.layer });
    }
    for enabled in &role.enabled_agents {
        let Some(other) = book.get(enabled) else {
            let known: Vec<&str> = book.keys().map(String::as_str).collect();
            return Err(RoleError::UnknownRole {
                role: name(),
                enabled: enabled.clone(),
                known: known.join(", "),
            });
        };
        if other.layer.is_above(role.layer) {
            return Err(RoleError::EnablesHigherLayer {
                role: name(),
                layer: role.layer,
                enabled: enabled.clone(),
                enabled_layer: other.layer,
            });
        }
    }
    Ok(())
}
