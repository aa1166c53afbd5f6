//! JSON text in the order an answer is written. A grammar built from a schema (llama.cpp's,
//! for the embedded model) makes the model write an object's required properties in the order
//! the schema's text lists them; `serde_json` sorts an object's keys, so a schema built with
//! `json!` would have every answer written in alphabetical order (a step's `acceptance` before
//! its `id`). [`schema_text`] lists each object's properties in the order of its `required`
//! array, which so says the order; [`value_text`] writes an example answer in that same order,
//! so the example the model reads is what the grammar lets it write.

use serde_json::{Map, Value};

/// `schema` as compact JSON text, each `properties` listing first the properties its node's
/// `required` names, in that order, then the others (sorted).
#[cfg(any(feature = "http", test))]
pub(crate) fn schema_text(schema: &Value) -> String {
    let mut out = String::new();
    write_schema(&mut out, schema);
    out
}

/// `value` as compact JSON text, each object's keys in the order [`schema_text`] gives the
/// matching node of `schema` (keys it does not know last, sorted).
pub(crate) fn value_text(value: &Value, schema: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, Some(schema));
    out
}

/// The keys of `properties` in answer order: those `required` names first, in its order.
fn ordered<'a>(properties: &'a Map<String, Value>, required: Option<&'a Value>) -> Vec<&'a str> {
    let mut keys: Vec<&str> = required
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|k| properties.contains_key(*k))
        .collect();
    for key in properties.keys() {
        if !keys.contains(&key.as_str()) {
            keys.push(key);
        }
    }
    keys
}

#[cfg(any(feature = "http", test))]
fn write_schema(out: &mut String, node: &Value) {
    let Value::Object(map) = node else {
        out.push_str(&node.to_string());
        return;
    };
    out.push('{');
    for (i, (key, value)) in map.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_key(out, key);
        match (key.as_str(), value) {
            ("properties" | "$defs" | "definitions", Value::Object(children)) => {
                let keys = if key == "properties" {
                    ordered(children, map.get("required"))
                } else {
                    children.keys().map(String::as_str).collect()
                };
                out.push('{');
                for (j, child) in keys.into_iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    write_key(out, child);
                    write_schema(out, &children[child]);
                }
                out.push('}');
            }
            ("items" | "additionalProperties" | "not", Value::Object(_)) => {
                write_schema(out, value)
            }
            ("anyOf" | "oneOf" | "allOf" | "prefixItems" | "items", Value::Array(schemas)) => {
                out.push('[');
                for (j, schema) in schemas.iter().enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    write_schema(out, schema);
                }
                out.push(']');
            }
            _ => out.push_str(&value.to_string()),
        }
    }
    out.push('}');
}

fn write_value(out: &mut String, value: &Value, schema: Option<&Value>) {
    match value {
        Value::Object(map) => {
            let properties = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
            let mut keys: Vec<&str> = properties
                .map(|p| ordered(p, schema.and_then(|s| s.get("required"))))
                .unwrap_or_default()
                .into_iter()
                .filter(|k| map.contains_key(*k))
                .collect();
            for key in map.keys() {
                if !keys.contains(&key.as_str()) {
                    keys.push(key);
                }
            }
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_key(out, key);
                write_value(out, &map[key], properties.and_then(|p| p.get(key)));
            }
            out.push('}');
        }
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.get("items")).filter(|s| s.is_object());
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, item_schema);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn write_key(out: &mut String, key: &str) {
    out.push_str(&Value::from(key).to_string());
    out.push(':');
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::*;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "steps": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "acceptance": {"type": "string"},
                            "id": {"type": "string"},
                            "role": {"enum": ["writer", null]},
                            "description": {"type": "string"}
                        },
                        "required": ["id", "description", "acceptance"]
                    }
                },
                "leads": {"type": "array", "items": {"enum": ["a", "b"]}}
            },
            "required": ["leads", "steps"]
        })
    }

    #[test]
    fn properties_follow_the_required_order_then_the_rest() {
        let text = schema_text(&schema());
        let at = |needle: &str| text.find(needle).unwrap();
        assert!(at("\"leads\"") < at("\"steps\""), "{text}");
        assert!(at("\"id\"") < at("\"description\""), "{text}");
        assert!(at("\"description\"") < at("\"acceptance\""), "{text}");
        assert!(at("\"acceptance\"") < at("\"role\""), "the optional one last: {text}");
        // The same schema, only reordered.
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), schema());
    }

    #[test]
    fn an_example_is_written_in_the_schemas_order() {
        let example = json!({"steps": [{"role": "writer", "acceptance": "ok", "description": "d",
            "id": "s1", "extra": 1}], "leads": ["a"]});
        let text = value_text(&example, &schema());
        assert_eq!(
            text,
            r#"{"leads":["a"],"steps":[{"id":"s1","description":"d","acceptance":"ok","role":"writer","extra":1}]}"#
        );
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), example);
    }
}
