//! The executor kinds `strata exec` runs, described for a reader: the list of
//! `strata exec --list --json` ([`list_json`]) and each kind's inputs read from its JSON
//! Schema ([`inputs`]), which the command prints as text.

use agent_executor::{Endpoint, Kind, Registry};
use serde_json::Value;

/// One input a kind takes, from its inputs schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindInput {
    /// Its name.
    pub name: String,
    /// Its JSON type in words, such as `string` or `string or array` (`any` when the schema
    /// names none).
    pub type_name: String,
    /// Whether the kind requires it.
    pub required: bool,
    /// What it is, as the schema says (empty when it says nothing).
    pub description: String,
}

/// The inputs `kind` takes, in the order of its schema's `properties` (none when it has
/// none).
pub fn inputs(kind: &dyn Kind) -> Vec<KindInput> {
    let schema = kind.inputs_schema();
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, property)| KindInput {
            name: name.clone(),
            type_name: property.get("type").map_or_else(|| "any".to_owned(), type_name),
            required: required.contains(&name.as_str()),
            description: property
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        })
        .collect()
}

/// A JSON Schema `type` (a name or a list of names) in words.
fn type_name(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Array(names) => {
            names.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or ")
        }
        other => other.to_string(),
    }
}

/// The endpoints a team file configures for the `integrations_agent` kind (none without a
/// team file).
pub fn endpoints(team: Option<&team_file::TeamFile>) -> Vec<&Endpoint> {
    team.map(|t| t.executor.endpoints.values().collect()).unwrap_or_default()
}

/// The kinds of `registry` and the `endpoints` as `strata exec --list --json` prints them:
/// `{"kinds": [{name, description, idempotent, inputs_schema}], "endpoints": [{name, method,
/// url, description}]}`.
pub fn list_json(registry: &Registry, endpoints: &[&Endpoint]) -> Value {
    let kinds: Vec<Value> = registry
        .kinds()
        .map(|k| {
            serde_json::json!({
                "name": k.name(),
                "description": k.description(),
                "idempotent": k.idempotent(),
                "inputs_schema": k.inputs_schema(),
            })
        })
        .collect();
    let endpoints: Vec<Value> = endpoints
        .iter()
        .map(|e| {
            serde_json::json!({
                "name": e.name, "method": e.method, "url": e.url, "description": e.description,
            })
        })
        .collect();
    serde_json::json!({ "kinds": kinds, "endpoints": endpoints })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    /// Every built-in kind's inputs are read from its schema: a required input is marked, a
    /// type list is said in words, and the JSON list holds every kind.
    #[test]
    fn each_kinds_inputs_come_from_its_schema() {
        let registry = agent_executor::builtins();
        let mut required = 0;
        for kind in registry.kinds() {
            let schema = kind.inputs_schema();
            let read = inputs(kind.as_ref());
            let names: Vec<&str> = read.iter().map(|i| i.name.as_str()).collect();
            let expected: Vec<&str> = schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().map(String::as_str).collect())
                .unwrap_or_default();
            assert_eq!(names, expected, "{}", kind.name());
            required += read.iter().filter(|i| i.required).count();
            assert!(read.iter().all(|i| !i.type_name.is_empty()), "{}", kind.name());
        }
        assert!(required > 0, "some built-in kind requires an input");
        let json = list_json(&registry, &[]);
        assert_eq!(json["kinds"].as_array().unwrap().len(), registry.kinds().count());
        assert_eq!(json["endpoints"], serde_json::json!([]));
        assert_eq!(type_name(&serde_json::json!(["string", "array"])), "string or array");
        assert_eq!(type_name(&serde_json::json!("integer")), "integer");
    }
}
