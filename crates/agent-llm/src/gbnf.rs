//! A JSON Schema as a GBNF grammar (llama.cpp's grammar format), for a server that constrains
//! its output by a `grammar` (llama.cpp's server, llama-cpp-python) but is given no schema on
//! its `/completions` endpoint. Pure: a schema in, the grammar's text out.
//!
//! It covers what the reasoner's answer schemas use, the subset [`crate::transcript`] keeps
//! (see `loosened` there): `type` (one or several), `properties` with `required`,
//! `additionalProperties`, `items`, `enum`, `const`, `anyOf` / `oneOf`, `minLength` /
//! `maxLength`, `minItems` / `maxItems`, and a string `pattern` of the form `^[class]{m,n}$`
//! (`+` and `*` too), the shape of the plan's step ids. Anything else is looser, never an
//! error: another pattern is any string of the schema's length, a number's bounds are not
//! enforced, a `$ref` is any value. The answer is checked against its schema after decoding
//! anyway; the grammar's work is that it parses and has the right shape.
//!
//! The layout follows llama.cpp's own converter, so both backends decode alike: an object's
//! properties in the order of its `required` list, then the optional ones in their order, each
//! at most once; no property the schema does not name when it names some; whitespace a space
//! or a newline with indentation after each token.

use std::collections::HashMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The whitespace allowed after each token (llama.cpp's).
const SPACE: &str = r#"| " " | "\n"{1,2} [ \t]{0,20}"#;

/// The rules every grammar may use, by name.
const BASE: [(&str, &str); 10] = [
    ("space", SPACE),
    ("char", r#"[^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt/] | "u" [0-9a-fA-F]{4})"#),
    ("string", r#""\"" char* "\"" space"#),
    ("integral-part", "[0] | [1-9] [0-9]{0,15}"),
    ("integer", r#"("-"? integral-part) space"#),
    ("number", r#"("-"? integral-part) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? space"#),
    ("boolean", r#"("true" | "false") space"#),
    ("null", r#""null" space"#),
    (
        "object",
        r#""{" space ( string ":" space value ("," space string ":" space value)* )? "}" space"#,
    ),
    ("array", r#""[" space ( value ("," space value)* )? "]" space"#),
];

/// The grammar of the JSON values `schema` allows, rooted at `root`.
pub(crate) fn grammar(schema: &Value) -> String {
    let mut builder = Builder::default();
    let root = builder.value(schema);
    let mut out = format!("root ::= {root}\n");
    for (name, body) in &builder.rules {
        let _ = writeln!(out, "{name} ::= {body}");
    }
    // The base rules used, and the base rules those use in turn.
    let mut used = [false; BASE.len()];
    loop {
        let mut changed = false;
        for (i, (name, _)) in BASE.iter().enumerate() {
            let needed = mentions(&out, name)
                || BASE.iter().zip(&used).any(|((_, body), u)| *u && mentions(body, name));
            if !used[i] && needed {
                used[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    for ((name, body), used) in BASE.iter().zip(used) {
        if used {
            let _ = writeln!(out, "{name} ::= {body}");
        }
    }
    out
}
/// Whether the grammar text `text` uses rule `name` (as a whole word outside literals).
fn mentions(text: &str, name: &str) -> bool {
    let mut in_literal = false;
    let mut escaped = false;
    let mut word = String::new();
    for c in text.chars().chain(std::iter::once(' ')) {
        if in_literal {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_literal = false,
                _ => {}
            }
            continue;
        }
        if c.is_ascii_alphanumeric() || c == '-' {
            word.push(c);
            continue;
        }
        if word == name {
            return true;
        }
        word.clear();
        in_literal = c == '"';
    }
    false
}

/// The rules made so far, each body once.
#[derive(Default)]
struct Builder {
    rules: Vec<(String, String)>,
    by_body: HashMap<String, String>,
}

impl Builder {
    /// The name of a rule with `body`: an existing one with the same body, or a new one.
    fn rule(&mut self, body: String) -> String {
        if let Some(name) = self.by_body.get(&body) {
            return name.clone();
        }
        let name = format!("r{}", self.rules.len() + 1);
        self.by_body.insert(body.clone(), name.clone());
        self.rules.push((name.clone(), body));
        name
    }

    /// An expression for the values `schema` allows.
    fn value(&mut self, schema: &Value) -> String {
        let Value::Object(map) = schema else {
            // `true`, `{}` or malformed: any value.
            return self.any();
        };
        if let Some(value) = map.get("const") {
            return self.rule(format!("{} space", literal(&value.to_string())));
        }
        if let Some(Value::Array(values)) =
            map.get("enum").filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
        {
            let options: Vec<String> = values.iter().map(|v| literal(&v.to_string())).collect();
            return self.rule(format!("({}) space", options.join(" | ")));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(Value::Array(options)) =
                map.get(key).filter(|o| o.as_array().is_some_and(|a| !a.is_empty()))
            {
                let options: Vec<String> = options.iter().map(|o| self.value(o)).collect();
                return self.rule(options.join(" | "));
            }
        }
        let types: Vec<&str> = match map.get("type") {
            Some(Value::String(t)) => vec![t.as_str()],
            Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
            _ if map.contains_key("properties") => vec!["object"],
            _ if map.contains_key("items") => vec!["array"],
            _ => Vec::new(),
        };
        if types.is_empty() {
            return self.any();
        }
        let options: Vec<String> = types.iter().map(|t| self.typed(t, map)).collect();
        if options.len() == 1 {
            options.into_iter().next().unwrap_or_default()
        } else {
            self.rule(options.join(" | "))
        }
    }

    /// The rule of any JSON value (defined on first use).
    fn any(&mut self) -> String {
        if !self.rules.iter().any(|(n, _)| n == "value") {
            self.rules.push((
                "value".to_owned(),
                "object | array | string | number | boolean | null".to_owned(),
            ));
        }
        "value".to_owned()
    }

    /// An expression for the values of type `kind` that `map` allows.
    fn typed(&mut self, kind: &str, map: &Map<String, Value>) -> String {
        match kind {
            "string" => self.string(map),
            "integer" => "integer".to_owned(),
            "number" => "number".to_owned(),
            "boolean" => "boolean".to_owned(),
            "null" => "null".to_owned(),
            "array" => self.array(map),
            "object" => self.object(map),
            _ => self.any(),
        }
    }

    fn string(&mut self, map: &Map<String, Value>) -> String {
        let bound = |key: &str| map.get(key).and_then(Value::as_u64);
        // A minimum above the maximum asks the impossible: the maximum wins.
        let at_most = |min: u64, max: Option<u64>| max.map_or(min, |max| min.min(max));
        let max = bound("maxLength");
        let min = at_most(bound("minLength").unwrap_or(0), max);
        if let Some((class, pmin, pmax)) =
            map.get("pattern").and_then(Value::as_str).and_then(simple_pattern)
        {
            let max = match (max, pmax) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let min = at_most(min.max(pmin), max);
            return self.rule(format!(r#""\"" {class}{} "\"" space"#, repeat(min, max)));
        }
        if min == 0 && max.is_none() {
            return "string".to_owned();
        }
        self.rule(format!(r#""\"" char{} "\"" space"#, repeat(min, max)))
    }

    fn array(&mut self, map: &Map<String, Value>) -> String {
        let item = match map.get("items") {
            Some(items @ Value::Object(_)) => self.value(items),
            _ => self.any(),
        };
        let max = map.get("maxItems").and_then(Value::as_u64);
        let min = map.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        // A minimum above the maximum asks the impossible: the maximum wins.
        let min = max.map_or(min, |max| min.min(max));
        if max == Some(0) {
            return self.rule(r#""[" space "]" space"#.to_owned());
        }
        let items = if max == Some(1) {
            item
        } else {
            let rest = repeat(min.saturating_sub(1), max.map(|m| m.saturating_sub(1)));
            format!(r#"{item} ("," space {item}){rest}"#)
        };
        let items = if min == 0 { format!("( {items} )?") } else { items };
        self.rule(format!(r#""[" space {items} "]" space"#))
    }

    fn object(&mut self, map: &Map<String, Value>) -> String {
        let properties = match map.get("properties") {
            Some(Value::Object(p)) if !p.is_empty() => p,
            _ => {
                return match map.get("additionalProperties") {
                    Some(extra @ Value::Object(_)) => {
                        let value = self.value(extra);
                        let pair = format!(r#"string ":" space {value}"#);
                        self.rule(format!(
                            r#""{{" space ( {pair} ("," space {pair})* )? "}}" space"#
                        ))
                    }
                    Some(Value::Bool(false)) => self.rule(r#""{" space "}" space"#.to_owned()),
                    _ => "object".to_owned(),
                };
            }
        };
        let required: Vec<&str> = match map.get("required") {
            Some(Value::Array(names)) => names.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        let pair = |this: &mut Self, name: &str| {
            let value = match properties.get(name) {
                Some(schema) => this.value(schema),
                None => this.any(),
            };
            format!(r#"{} space ":" space {value}"#, literal(&Value::from(name).to_string()))
        };
        let mut seen: Vec<&str> = Vec::new();
        let mut must = Vec::new();
        for name in &required {
            if !seen.contains(name) {
                seen.push(name);
                must.push(pair(self, name));
            }
        }
        let mut optional = Vec::new();
        for name in properties.keys() {
            if !seen.contains(&name.as_str()) {
                seen.push(name);
                optional.push(pair(self, name));
            }
        }
        let body = if must.is_empty() {
            // Any subset of the optional properties, in order: the first one present, then
            // each later one or not.
            let starts: Vec<String> = (0..optional.len())
                .map(|first| {
                    let mut alt = optional[first].clone();
                    for later in &optional[first + 1..] {
                        let _ = write!(alt, r#" ("," space {later})?"#);
                    }
                    alt
                })
                .collect();
            format!("( {} )?", starts.join(" | "))
        } else {
            let mut body = must.join(r#" "," space "#);
            for later in &optional {
                let _ = write!(body, r#" ("," space {later})?"#);
            }
            body
        };
        self.rule(format!(r#""{{" space {body} "}}" space"#))
    }
}

/// The repetition suffix for between `min` and `max` (unbounded: `None`) occurrences.
fn repeat(min: u64, max: Option<u64>) -> String {
    match (min, max) {
        (0, None) => "*".to_owned(),
        (1, None) => "+".to_owned(),
        (min, None) => format!("{{{min},}}"),
        (0, Some(1)) => "?".to_owned(),
        (min, Some(max)) if min == max => format!("{{{min}}}"),
        (min, Some(max)) => format!("{{{min},{}}}", max.max(min)),
    }
}

/// `^[class]{m,n}$` (or `+`, `*`, `{m}`, `{m,}`): the class, kept as written when it holds only
/// letters, digits, `_`, `-` and `.` (and ranges of them), and the bounds.
fn simple_pattern(pattern: &str) -> Option<(String, u64, Option<u64>)> {
    let inner = pattern.strip_prefix("^[")?.strip_suffix('$')?;
    let (class, count) = inner.split_once(']')?;
    if class.is_empty()
        || !class.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return None;
    }
    let (min, max) = match count {
        "+" => (1, None),
        "*" => (0, None),
        _ => {
            let bounds = count.strip_prefix('{')?.strip_suffix('}')?;
            match bounds.split_once(',') {
                None => {
                    let n = bounds.parse().ok()?;
                    (n, Some(n))
                }
                Some((min, "")) => (min.parse().ok()?, None),
                Some((min, max)) => (min.parse().ok()?, Some(max.parse().ok()?)),
            }
        }
    };
    Some((format!("[{class}]"), min, max))
}

/// `text` as a GBNF string literal.
fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                let _ = write!(out, "\\x{:02X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use serde_json::json;

    use super::*;

    #[test]
    fn a_tool_call_keeps_its_property_order_and_names_no_other_property() {
        let schema = json!({
            "type": "object",
            "properties": {"arguments": {"type": "object", "properties": {
                "path": {"type": "string", "maxLength": 40},
                "mode": {"enum": ["a", "w"]},
            }, "required": ["path"]}, "tool": {"const": "write_file"}},
            "required": ["tool", "arguments"],
        });
        let g = grammar(&schema);
        assert_eq!(
            g.lines().next().unwrap(),
            "root ::= r5",
            "the root is the outer object, made last: {g}"
        );
        assert!(g.contains(r#"r1 ::= "\"write_file\"" space"#), "{g}");
        assert!(g.contains(r#"r2 ::= "\"" char{0,40} "\"" space"#), "{g}");
        assert!(g.contains(r#"r3 ::= ("\"a\"" | "\"w\"") space"#), "{g}");
        assert!(
            g.contains(r#"r4 ::= "{" space "\"path\"" space ":" space r2 ("," space "\"mode\"" space ":" space r3)? "}" space"#),
            "{g}"
        );
        assert!(
            g.contains(r#"r5 ::= "{" space "\"tool\"" space ":" space r1 "," space "\"arguments\"" space ":" space r4 "}" space"#),
            "tool first, as required lists it: {g}"
        );
        for base in ["space ::=", "char ::="] {
            assert!(g.contains(base), "{base} is used: {g}");
        }
        assert!(!g.contains("number ::="), "unused rules are left out: {g}");
    }

    #[test]
    fn alternatives_arrays_and_step_id_patterns() {
        let schema = json!({"anyOf": [
            {"type": "object", "properties": {"steps": {"type": "array", "minItems": 1, "maxItems": 3,
                "items": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"}}}, "required": ["steps"]},
            {"type": "object", "properties": {"answer": {"type": ["string", "null"]}}, "required": ["answer"]},
        ]});
        let g = grammar(&schema);
        assert!(g.contains(r#""\"" [A-Za-z0-9_-]{1,40} "\"" space"#), "{g}");
        assert!(g.contains(r#""[" space r1 ("," space r1){0,2} "]" space"#), "{g}");
        assert!(g.contains("string | null"), "a type list is an alternative: {g}");
        // A pattern it cannot express is a string of the schema's length.
        let loose = grammar(&json!({"type": "string", "pattern": "^a+b$", "maxLength": 5}));
        assert!(loose.contains(r#""\"" char{0,5} "\"" space"#), "{loose}");
    }

    #[test]
    fn optional_only_objects_allow_any_subset_in_order_and_any_value_is_defined() {
        let g = grammar(&json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "b": {}, "c": {"type": "boolean"}}}));
        assert!(
            g.contains(r#"( "\"a\"" space ":" space integer ("," space "\"b\"" space ":" space value)? ("," space "\"c\"" space ":" space boolean)? | "\"b\"" space ":" space value ("," space "\"c\"" space ":" space boolean)? | "\"c\"" space ":" space boolean )?"#),
            "{g}"
        );
        for rule in ["value ::=", "object ::=", "array ::=", "number ::=", "integral-part ::="] {
            assert!(g.contains(rule), "{rule} is defined, since value uses it: {g}");
        }
    }

    #[test]
    fn literals_are_escaped() {
        assert_eq!(literal("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\x01""#);
        let g = grammar(&json!({"const": "say \"hi\""}));
        assert!(g.contains(r#""\"say \\\"hi\\\"\"" space"#), "{g}");
    }

    #[test]
    fn one_item_arrays_and_minimums_above_their_maximum() {
        let one = grammar(&json!({"type": "array", "items": {"type": "integer"}, "maxItems": 1}));
        assert!(one.contains(r#""[" space ( integer )? "]" space"#), "{one}");
        let exactly_one = grammar(&json!({"type": "array", "items": {"type": "integer"},
            "minItems": 1, "maxItems": 1}));
        assert!(exactly_one.contains(r#""[" space integer "]" space"#), "{exactly_one}");
        let impossible = grammar(&json!({"type": "array", "items": {"type": "integer"},
            "minItems": 9, "maxItems": 2}));
        assert!(impossible.contains(r#"("," space integer){1}"#), "{impossible}");
        let string = grammar(&json!({"type": "string", "minLength": 9, "maxLength": 2}));
        assert!(string.contains("char{2}"), "{string}");
        let pattern = grammar(&json!({"type": "string", "pattern": "^[a-z]{50,60}$",
            "maxLength": 4}));
        assert!(pattern.contains("[a-z]{4}"), "{pattern}");
    }

    /// A tool's schema (an MCP server's, say) asking for a billion characters or items gets a
    /// grammar of ordinary size: [`crate::transcript::bounded`] caps what it asks.
    #[test]
    fn a_hostile_schema_gives_a_grammar_of_ordinary_size() {
        use crate::transcript::{LARGEST_ARRAY_ITEMS, LARGEST_STRING_CHARS, bounded};
        let hostile = json!({"type": "object", "properties": {
            "text": {"type": "string", "minLength": 1_000_000_000_u64, "maxLength": 2_000_000_000_u64},
            "list": {"type": "array", "maxItems": 1_000_000_000_u64, "minItems": -3,
                "items": {"type": "string", "maxLength": "many"}},
            "code": {"type": "string", "pattern": "^[a-z]{99999999}$"},
            "small": {"type": "string", "pattern": "^[a-z]{2,5}$"}
        }, "required": ["text", "list", "code", "small"]});
        let schema = bounded(&hostile);
        let text = &schema["properties"]["text"];
        assert_eq!(text["maxLength"], LARGEST_STRING_CHARS);
        assert_eq!(text["minLength"], LARGEST_STRING_CHARS, "a minimum is at most the maximum");
        let list = &schema["properties"]["list"];
        assert_eq!(list["maxItems"], LARGEST_ARRAY_ITEMS);
        assert!(list.get("minItems").is_none(), "a negative minimum is dropped");
        assert_eq!(
            list["items"]["maxLength"],
            crate::transcript::MAX_STRING_CHARS,
            "a bound that is not a count is the default"
        );
        assert!(schema["properties"]["code"].get("pattern").is_none(), "a huge count is dropped");
        assert_eq!(schema["properties"]["small"]["pattern"], "^[a-z]{2,5}$", "a small one stays");
        let g = grammar(&schema);
        assert!(g.len() < 4_000, "{} bytes: {g}", g.len());
        assert!(g.contains(&format!("char{{{LARGEST_STRING_CHARS}}}")), "{g}");
        assert!(g.contains(&format!("{{0,{}}}", LARGEST_ARRAY_ITEMS - 1)), "{g}");
    }

    #[test]
    fn repeats() {
        assert_eq!(repeat(0, None), "*");
        assert_eq!(repeat(1, None), "+");
        assert_eq!(repeat(2, None), "{2,}");
        assert_eq!(repeat(0, Some(1)), "?");
        assert_eq!(repeat(3, Some(3)), "{3}");
        assert_eq!(repeat(1, Some(4)), "{1,4}");
        assert_eq!(simple_pattern("^[a-z]+$"), Some(("[a-z]".to_owned(), 1, None)));
        assert_eq!(simple_pattern("^[a-z]{2}$"), Some(("[a-z]".to_owned(), 2, Some(2))));
        assert_eq!(simple_pattern("^[^a]+$"), None);
        assert_eq!(simple_pattern("^[a-z]+"), None);
    }
}
