//! Whether an MCP tool's input schema is JSON Schema at all: [`check_input_schema`].
//!
//! An MCP server may use any JSON Schema keyword; the server checks a call's arguments itself
//! (and the registry checks the keywords it knows). What is refused here is a schema no JSON
//! Schema validator could use: a root that is not an object schema, an unknown `type`, a
//! keyword whose value has the wrong shape (`properties` that is not an object, `required`
//! that is not a list of names, a negative `minLength`, a subschema that is neither an object
//! nor a boolean). Keywords this check does not know are allowed.

use serde_json::{Map, Value};

/// The JSON Schema type names.
const TYPES: [&str; 7] = ["object", "string", "integer", "number", "boolean", "array", "null"];

/// Keywords whose value is one subschema.
const ONE_SCHEMA: [&str; 11] = [
    "items",
    "additionalProperties",
    "additionalItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
];

/// Keywords whose value is a non-empty array of subschemas.
const SCHEMA_LISTS: [&str; 4] = ["allOf", "anyOf", "oneOf", "prefixItems"];

/// Keywords whose value maps names to subschemas.
const SCHEMA_MAPS: [&str; 5] =
    ["properties", "patternProperties", "$defs", "definitions", "dependentSchemas"];

/// Keywords whose value is a non-negative integer.
const COUNTS: [&str; 8] = [
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
];

/// Keywords whose value is a number.
const NUMBERS: [&str; 5] =
    ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"];

/// The problems that make `schema` unusable as a tool's input schema, each starting with the
/// JSON pointer of the node (`` `#/properties/x/type` ``). Empty when it is usable.
pub fn check_input_schema(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    match schema.as_object() {
        Some(root) if root.get("type").and_then(Value::as_str) == Some("object") => {
            check_node(root, "#", &mut problems);
        }
        Some(root) => {
            problems.push("`#`: the root of an input schema must have \"type\": \"object\"".into());
            check_node(root, "#", &mut problems);
        }
        None => problems.push("`#`: an input schema must be a JSON object".into()),
    }
    problems
}

fn check_schema(schema: &Value, pointer: &str, problems: &mut Vec<String>) {
    match schema {
        Value::Object(node) => check_node(node, pointer, problems),
        Value::Bool(_) => {}
        _ => problems.push(format!("`{pointer}`: a schema must be a JSON object or a boolean")),
    }
}

fn check_node(node: &Map<String, Value>, pointer: &str, problems: &mut Vec<String>) {
    let mut keywords: Vec<(&String, &Value)> = node.iter().collect();
    keywords.sort_by_key(|(keyword, _)| *keyword);
    for (keyword, value) in keywords {
        let here = format!("{pointer}/{}", escape(keyword));
        let keyword = keyword.as_str();
        if ONE_SCHEMA.contains(&keyword) {
            // `items` may also be an array of schemas (draft 4 to 2019-09 tuples).
            match (keyword, value) {
                ("items", Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        check_schema(item, &format!("{here}/{i}"), problems);
                    }
                }
                _ => check_schema(value, &here, problems),
            }
        } else if SCHEMA_LISTS.contains(&keyword) {
            match value.as_array() {
                Some(items) if !items.is_empty() => {
                    for (i, item) in items.iter().enumerate() {
                        check_schema(item, &format!("{here}/{i}"), problems);
                    }
                }
                _ => problems.push(format!("`{here}`: must be a non-empty array of schemas")),
            }
        } else if SCHEMA_MAPS.contains(&keyword) {
            match value.as_object() {
                Some(map) => {
                    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                    entries.sort_by_key(|(name, _)| *name);
                    for (name, item) in entries {
                        check_schema(item, &format!("{here}/{}", escape(name)), problems);
                    }
                }
                None => problems.push(format!("`{here}`: must map names to schemas")),
            }
        } else if let Some(problem) = keyword_problem(keyword, value) {
            problems.push(format!("`{here}`: {problem}"));
        }
    }
}

/// What is wrong with a keyword that holds no subschema, if anything.
fn keyword_problem(keyword: &str, value: &Value) -> Option<String> {
    match keyword {
        "type" => {
            let names: Vec<&Value> = match value {
                Value::Array(names) if !names.is_empty() => names.iter().collect(),
                Value::String(_) => vec![value],
                _ => return Some("must be a type name or a non-empty array of them".into()),
            };
            names
                .into_iter()
                .find(|name| !name.as_str().is_some_and(|name| TYPES.contains(&name)))
                .map(|name| format!("unknown type {name}; JSON Schema has: {}", TYPES.join(", ")))
        }
        "required" => (!value.as_array().is_some_and(|names| names.iter().all(Value::is_string)))
            .then(|| "must be an array of property names".into()),
        "enum" => (!value.is_array()).then(|| "must be an array of values".into()),
        "pattern" | "format" | "$ref" | "title" | "description" => {
            (!value.is_string()).then(|| "must be a string".into())
        }
        k if COUNTS.contains(&k) => {
            (!value.is_u64()).then(|| "must be a non-negative integer".into())
        }
        k if NUMBERS.contains(&k) => {
            // Draft 4 wrote `exclusiveMinimum: true`.
            let fine = value.is_number() || (k.starts_with("exclusive") && value.is_boolean());
            (!fine).then(|| "must be a number".into())
        }
        _ => None,
    }
}

/// Escapes a JSON pointer token (RFC 6901).
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
