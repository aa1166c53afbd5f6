//! The built-in registry: the four built-in kinds under their names, each with a
//! description and an inputs schema the executor can check requests against.

use agent_core::tools::{check_schema, validate};
use agent_executor::{
    INTEGRATIONS_AGENT, PLANNER_AGENT, RESEARCH_AGENT, Registry, RegistryError, WRITER_AGENT,
    builtins, register_builtins,
};
use serde_json::json;

#[test]
fn the_four_kinds_are_registered_with_usable_schemas() {
    let registry = builtins();
    let names: Vec<&str> = registry.names().collect();
    assert_eq!(names, [INTEGRATIONS_AGENT, PLANNER_AGENT, RESEARCH_AGENT, WRITER_AGENT]);
    assert_eq!(
        [RESEARCH_AGENT, WRITER_AGENT, PLANNER_AGENT, INTEGRATIONS_AGENT],
        ["research_agent", "writer_agent", "planner_agent", "integrations_agent"]
    );
    for kind in registry.kinds() {
        assert!(!kind.description().trim().is_empty(), "{}", kind.name());
        let schema = kind.inputs_schema();
        assert_eq!(check_schema(&schema), Vec::<String>::new(), "{}", kind.name());
        // Unknown inputs are refused, so a misspelt one is not silently ignored.
        assert!(!validate(&schema, &json!({"no_such_input": 1})).is_empty(), "{}", kind.name());
    }
    let integrations = registry.get(INTEGRATIONS_AGENT).unwrap();
    assert_eq!(
        validate(&integrations.inputs_schema(), &json!({})),
        ["`endpoint`: required property is missing"]
    );
    assert!(!integrations.idempotent());
    for idempotent in [RESEARCH_AGENT, WRITER_AGENT, PLANNER_AGENT] {
        assert!(registry.get(idempotent).unwrap().idempotent(), "{idempotent}");
    }
}

#[test]
fn the_builtins_join_a_registry_of_ones_own_but_not_twice() {
    let mut registry = Registry::new();
    register_builtins(&mut registry).unwrap();
    assert_eq!(registry.names().count(), 4);
    assert_eq!(
        register_builtins(&mut registry),
        Err(RegistryError::Duplicate(RESEARCH_AGENT.into()))
    );
}
