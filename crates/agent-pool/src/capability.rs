//! The capability registry: which capabilities exist and which layers may use them.

use std::collections::BTreeMap;

use agent_state::{Action, AgentLayer, Capability};
use serde::{Deserialize, Serialize};

/// One registered capability.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapabilityInfo {
    /// Its name, such as `plan` or a custom `database_query`.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The layers that may use it.
    pub layers: Vec<AgentLayer>,
}

/// Capabilities by name. [`CapabilityRegistry::with_builtins`] holds the ten of
/// docs/concepts.md#capabilities.
#[derive(Clone, Debug, Default)]
pub struct CapabilityRegistry {
    capabilities: BTreeMap<String, CapabilityInfo>,
}

impl CapabilityRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The ten built-in capabilities with the layers of the §7.1 matrix.
    pub fn with_builtins() -> Self {
        let mut registry = Self::new();
        for capability in Capability::ALL {
            registry.register(CapabilityInfo {
                name: capability.as_str().to_owned(),
                description: capability.description().to_owned(),
                layers: capability.layers().collect(),
            });
        }
        registry
    }

    /// Registers a capability, replacing (and returning) one of the same name.
    pub fn register(&mut self, capability: CapabilityInfo) -> Option<CapabilityInfo> {
        self.capabilities.insert(capability.name.clone(), capability)
    }

    /// A capability by name.
    pub fn get(&self, name: &str) -> Option<&CapabilityInfo> {
        self.capabilities.get(name)
    }

    /// Whether an agent of `layer` may use `name`; `false` for an unknown capability.
    pub fn can_execute(&self, layer: AgentLayer, name: &str) -> bool {
        self.get(name).is_some_and(|c| c.layers.contains(&layer))
    }

    /// The capability `action` needs, as registered: the mapping is
    /// [`Action::required_capability`], the one table of which act needs which capability.
    /// `None` if that capability is not registered here.
    pub fn for_action(&self, action: Action) -> Option<&CapabilityInfo> {
        self.get(action.required_capability().as_str())
    }

    /// Whether an agent of `layer` may do `action`: whether its layer may use the capability
    /// the action needs. An agent also needs that capability in its own configuration, which
    /// the runtime checks where the act happens.
    pub fn can_perform(&self, layer: AgentLayer, action: Action) -> bool {
        self.can_execute(layer, action.required_capability().as_str())
    }

    /// The capabilities `layer` may use, by name.
    pub fn list(&self, layer: AgentLayer) -> Vec<&CapabilityInfo> {
        self.capabilities.values().filter(|c| c.layers.contains(&layer)).collect()
    }
}
