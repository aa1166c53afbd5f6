//! Unit tests for the capability registry and the metrics calculator.

use agent_state::{AgentId, AgentLayer, AgentMetrics, AgentStatus, Capability};

use crate::{CapabilityInfo, CapabilityRegistry, MetricsCalculator};

#[test]
fn builtins_follow_the_layer_capability_matrix() {
    let registry = CapabilityRegistry::with_builtins();
    for capability in Capability::ALL {
        for layer in AgentLayer::ALL {
            assert_eq!(
                registry.can_execute(layer, capability.as_str()),
                layer.allows(capability),
                "{layer} / {capability}"
            );
        }
    }
    let bottom: Vec<&str> =
        registry.list(AgentLayer::Bottom).iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        bottom,
        ["code_gen", "coordinate", "execute", "plan", "reflect", "test_exec", "tool_call"]
    );
    assert_eq!(registry.list(AgentLayer::Top).len(), 6);
    assert_eq!(registry.list(AgentLayer::Mid).len(), 5);
}

#[test]
fn custom_capabilities_register_and_replace() {
    let mut registry = CapabilityRegistry::with_builtins();
    assert!(
        !registry.can_execute(AgentLayer::Mid, "database_query"),
        "unknown capabilities are refused"
    );
    let query = CapabilityInfo {
        name: "database_query".into(),
        description: "query the project database".into(),
        layers: vec![AgentLayer::Mid, AgentLayer::Bottom],
    };
    assert_eq!(registry.register(query.clone()), None);
    assert!(registry.can_execute(AgentLayer::Mid, "database_query"));
    assert!(!registry.can_execute(AgentLayer::Top, "database_query"));
    assert_eq!(registry.get("database_query"), Some(&query));
    let narrowed = CapabilityInfo { layers: vec![AgentLayer::Bottom], ..query.clone() };
    assert_eq!(registry.register(narrowed), Some(query));
    assert!(!registry.can_execute(AgentLayer::Mid, "database_query"));
}

#[test]
fn the_calculator_scores_with_the_seed_weights() {
    let metrics = AgentMetrics {
        tasks_completed: 3,
        tasks_failed: 1,
        average_task_duration_ms: 30_000.0,
        heartbeats_responded: 9,
        heartbeats_missed: 1,
        ..AgentMetrics::default()
    };
    assert!((MetricsCalculator::performance_score(&metrics) - 72.0).abs() < 1e-9);
    let line = MetricsCalculator::summarize(
        AgentId::new("bottom-1"),
        AgentLayer::Bottom,
        AgentStatus::Idle,
        metrics,
    );
    assert!((line.score - 72.0).abs() < 1e-9);
    assert_eq!(MetricsCalculator::performance_score(&AgentMetrics::default()), 100.0);
}

#[test]
fn the_registry_maps_actions_through_the_one_table() {
    use agent_state::Action;
    let registry = CapabilityRegistry::with_builtins();
    for action in Action::ALL {
        let needed = action.required_capability();
        assert_eq!(registry.for_action(action).map(|c| c.name.as_str()), Some(needed.as_str()));
        for layer in AgentLayer::ALL {
            assert_eq!(
                registry.can_perform(layer, action),
                layer.allows(needed),
                "{layer} {action}"
            );
        }
    }
    assert!(registry.can_perform(AgentLayer::Mid, Action::AssignWork));
    assert!(!registry.can_perform(AgentLayer::Mid, Action::Vote));
    assert!(!registry.can_perform(AgentLayer::Top, Action::CallTool));
    assert_eq!(CapabilityRegistry::new().for_action(Action::CallTool), None);
    assert!(!CapabilityRegistry::new().can_perform(AgentLayer::Bottom, Action::CallTool));
}
