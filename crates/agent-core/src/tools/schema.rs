//! A small JSON Schema subset: checking tool argument schemas and validating arguments.
//!
//! Supported keywords: `type` (`object`, `string`, `integer`, `number`, `boolean`, `array`,
//! `null`, or an array of them), `properties`, `required`, `additionalProperties` (a boolean),
//! `items`, `enum`, `minimum`, `maximum` and `minLength`; the annotations `description`,
//! `title`, `default`, `examples`, `$schema`, `$id` and `$comment` are allowed and ignored.
//! [`check_schema`] refuses any other keyword, so a schema never promises a check that
//! [`validate`] would silently skip.
//!
//! As in JSON Schema, a keyword applies only to values of its kind: `minLength` to strings,
//! `minimum` to numbers, `properties` to objects. Unlike JSON Schema, `integer` means a JSON
//! number written without a fraction or exponent (`3`, not `3.0`), which is what a tool
//! deserializing into an integer type accepts.

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

/// The problems of `value` against `schema`, one message per problem, each starting with the
/// JSON path of the offending value (`` `path` ``, `` `items[2].name` ``, or `arguments` for
/// the whole value). Empty when `value` is valid.
///
/// `schema` is expected to have passed [`check_schema`]; malformed keywords are ignored.
///
/// ```
/// use agent_core::tools::validate;
/// use serde_json::json;
///
/// let schema = json!({
///     "type": "object",
///     "properties": { "path": { "type": "string" }, "timeout_ms": { "type": "integer" } },
///     "required": ["path"],
/// });
/// assert_eq!(
///     validate(&schema, &json!({ "timeout_ms": "5" })),
///     ["`path`: required property is missing", "`timeout_ms`: expected integer, found string"],
/// );
/// assert!(validate(&schema, &json!({ "path": "a.txt" })).is_empty());
/// ```
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    validate_node(schema, value, &mut Vec::new(), &mut problems);
    problems
}

/// The problems of `schema` as a tool argument schema: its root must be an object schema
/// (`"type": "object"`), and every node may use only the supported keywords, each with a value
/// of the right shape. Each message starts with the JSON pointer of the node (`` `#/properties/path` ``).
/// Empty when the schema is usable.
pub fn check_schema(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        problems.push("`#`: the root of an argument schema must have \"type\": \"object\"".into());
    }
    check_node(schema, "#", &mut problems);
    problems
}

/// One step of a JSON path into a value.
enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

const TYPES: [&str; 7] = ["object", "string", "integer", "number", "boolean", "array", "null"];

const KEYWORDS: [&str; 9] = [
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "minimum",
    "maximum",
    "minLength",
];

const ANNOTATIONS: [&str; 7] =
    ["description", "title", "default", "examples", "$schema", "$id", "$comment"];

fn validate_node<'v>(
    schema: &Value,
    value: &'v Value,
    path: &mut Vec<Segment<'v>>,
    problems: &mut Vec<String>,
) {
    let Some(schema) = schema.as_object() else {
        return;
    };
    if let Some(expected) = schema.get("type") {
        let allowed: Vec<&str> = match expected {
            Value::String(name) => vec![name.as_str()],
            Value::Array(names) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !allowed.is_empty() && !allowed.iter().any(|name| has_type(value, name)) {
            let expected = allowed.join(" or ");
            let found = type_name(value);
            problems.push(at(path, &format!("expected {expected}, found {found}")));
            return;
        }
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.contains(value)
    {
        let options: Vec<String> = options.iter().map(Value::to_string).collect();
        let message = format!("expected one of {}, found {value}", options.join(", "));
        problems.push(at(path, &message));
    }
    match value {
        Value::Number(number) => check_bounds(schema, number, path, problems),
        Value::String(text) => {
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64) {
                let len = text.chars().count() as u64;
                if len < min {
                    let message = if min == 1 {
                        "must not be empty".to_owned()
                    } else {
                        format!("must be at least {min} characters long, found {len}")
                    };
                    problems.push(at(path, &message));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    path.push(Segment::Index(index));
                    validate_node(item_schema, item, path, problems);
                    path.pop();
                }
            }
        }
        Value::Object(object) => validate_object(schema, object, path, problems),
        Value::Null | Value::Bool(_) => {}
    }
}

fn validate_object<'v>(
    schema: &Map<String, Value>,
    object: &'v Map<String, Value>,
    path: &mut Vec<Segment<'v>>,
    problems: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !object.contains_key(name) {
                let rendered = render_with(path, name);
                problems.push(format!("`{rendered}`: required property is missing"));
            }
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    // Sorted explicitly so messages come in the same order whatever map serde_json uses.
    let mut entries: Vec<(&'v String, &'v Value)> = object.iter().collect();
    entries.sort_by_key(|(key, _)| *key);
    for (key, item) in entries {
        match properties.and_then(|properties| properties.get(key)) {
            Some(property_schema) => {
                path.push(Segment::Key(key));
                validate_node(property_schema, item, path, problems);
                path.pop();
            }
            None if closed => {
                let allowed: Vec<&str> = properties
                    .map(|properties| properties.keys().map(String::as_str).collect())
                    .unwrap_or_default();
                let message = if allowed.is_empty() {
                    "unknown property; this object takes no properties".to_owned()
                } else {
                    format!("unknown property; expected one of: {}", allowed.join(", "))
                };
                path.push(Segment::Key(key));
                problems.push(at(path, &message));
                path.pop();
            }
            None => {}
        }
    }
}

fn check_bounds(
    schema: &Map<String, Value>,
    number: &Number,
    path: &[Segment<'_>],
    problems: &mut Vec<String>,
) {
    if let Some(Value::Number(min)) = schema.get("minimum")
        && compare(number, min) == Some(Ordering::Less)
    {
        problems.push(at(path, &format!("{number} is less than the minimum {min}")));
    }
    if let Some(Value::Number(max)) = schema.get("maximum")
        && compare(number, max) == Some(Ordering::Greater)
    {
        problems.push(at(path, &format!("{number} is greater than the maximum {max}")));
    }
}

/// Compares two JSON numbers exactly when both are integers, as floats otherwise.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    match (as_i128(a), as_i128(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

fn as_i128(number: &Number) -> Option<i128> {
    number.as_i64().map(i128::from).or_else(|| number.as_u64().map(i128::from))
}

fn has_type(value: &Value, name: &str) -> bool {
    match name {
        "number" => value.is_number(),
        "integer" => value.is_i64() || value.is_u64(),
        _ => type_name(value) == name,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_i64() || number.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `message` prefixed with the rendered `path`.
fn at(path: &[Segment<'_>], message: &str) -> String {
    if path.is_empty() {
        format!("arguments: {message}")
    } else {
        format!("`{}`: {message}", render(path))
    }
}

/// `path` as `a.b[2].c`; keys that are not plain identifiers are quoted: `a["x y"]`.
fn render(path: &[Segment<'_>]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Index(index) => {
                let _ = write!(out, "[{index}]");
            }
            Segment::Key(key) if is_plain(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Key(key) => {
                let _ = write!(out, "[{}]", Value::from(*key));
            }
        }
    }
    out
}

fn render_with(path: &[Segment<'_>], key: &str) -> String {
    let mut rendered = render(path);
    if is_plain(key) {
        if !rendered.is_empty() {
            rendered.push('.');
        }
        rendered.push_str(key);
    } else {
        let _ = write!(rendered, "[{}]", Value::from(key));
    }
    rendered
}

fn is_plain(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn check_node(schema: &Value, pointer: &str, problems: &mut Vec<String>) {
    let Some(node) = schema.as_object() else {
        problems.push(format!("`{pointer}`: a schema must be a JSON object"));
        return;
    };
    let mut keywords: Vec<(&String, &Value)> = node.iter().collect();
    keywords.sort_by_key(|(keyword, _)| *keyword);
    for (keyword, value) in keywords {
        let here = format!("{pointer}/{}", escape_pointer(keyword));
        match (keyword.as_str(), value) {
            ("properties", Value::Object(properties)) => {
                let mut properties: Vec<(&String, &Value)> = properties.iter().collect();
                properties.sort_by_key(|(name, _)| *name);
                for (name, property) in properties {
                    check_node(property, &format!("{here}/{}", escape_pointer(name)), problems);
                }
            }
            ("items", item_schema) => check_node(item_schema, &here, problems),
            _ => {
                if let Some(problem) = keyword_problem(keyword, value) {
                    problems.push(format!("`{here}`: {problem}"));
                }
            }
        }
    }
}

/// What is wrong with one keyword of a schema node, if anything (subschemas are checked by
/// [`check_node`]).
fn keyword_problem(keyword: &str, value: &Value) -> Option<String> {
    let fine = match keyword {
        "type" => {
            let names: Vec<&Value> = match value {
                Value::Array(names) => names.iter().collect(),
                Value::String(_) => vec![value],
                _ => Vec::new(),
            };
            let unknown =
                names.iter().find(|name| !name.as_str().is_some_and(|name| TYPES.contains(&name)));
            if let Some(name) = unknown {
                return Some(format!("unknown type {name}; use one of: {}", TYPES.join(", ")));
            }
            !names.is_empty()
        }
        "properties" => value.is_object(),
        "required" => value.as_array().is_some_and(|names| names.iter().all(Value::is_string)),
        "additionalProperties" => value.is_boolean(),
        "enum" => value.as_array().is_some_and(|options| !options.is_empty()),
        "minimum" | "maximum" => value.is_number(),
        "minLength" => value.is_u64(),
        other if ANNOTATIONS.contains(&other) => true,
        other => {
            return Some(format!(
                "unsupported keyword `{other}`; use only: {}",
                KEYWORDS.join(", ")
            ));
        }
    };
    if fine {
        return None;
    }
    let expected = match keyword {
        "type" => "a type name or a non-empty array of type names",
        "properties" => "an object mapping property names to schemas",
        "required" => "an array of property names",
        "additionalProperties" => "`true` or `false` (schemas are not supported here)",
        "enum" => "a non-empty array of allowed values",
        "minimum" | "maximum" => "a number",
        _ => "a non-negative integer",
    };
    Some(format!("must be {expected}"))
}

/// Escapes a JSON pointer token (RFC 6901).
fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}
