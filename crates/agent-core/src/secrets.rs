//! The secret values this process knows, and their redaction before anything is stored or
//! served.
//!
//! The CLI registers every secret it reads ([`register`], [`register_env`]): the model
//! providers' API keys, the dashboard's token, the OpenTelemetry export's headers, the values
//! of an MCP server's environment whose names look secret ([`looks_secret`]). Values shorter
//! than [`MIN_LEN`] characters are ignored (they would redact ordinary words). [`redact`]
//! replaces each registered value in a text with [`REDACTED`]; it is applied where things are
//! stored or served: every audit record (before it is hashed, so the chain verifies), every
//! write to a whiteboard, every tool output, every turn of a conversation, the dashboard's
//! responses and what the CLI prints.
//!
//! Cost: with no secret registered, [`redact`] is one atomic load and returns the text
//! borrowed; with some, one pass over the text (a table of the secrets' first bytes, then a
//! comparison where one starts), borrowed again when nothing matched.
//!
//! ```
//! use agent_core::secrets;
//!
//! secrets::register("sk-doc-example-0123456789");
//! secrets::register("short"); // ignored: shorter than MIN_LEN
//! assert_eq!(secrets::redact("key=sk-doc-example-0123456789."), "key=[redacted].");
//! assert_eq!(secrets::redact("short"), "short");
//! ```

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// What a secret value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Strata's own secret environment variables: the providers' API keys, the dashboard's token
/// and the OpenTelemetry export's headers. Registered at start by the CLI, never passed to a
/// command or an MCP server (not even when a team file names one), refused by name where a
/// team file lists variables to pass.
pub const ENV_VARS: [&str; 6] = [
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "STRATA_SERVE_TOKEN",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
];

/// Registers the values of every set variable of [`ENV_VARS`] (a header list value by value,
/// see [`register_header_list`]).
pub fn register_strata_env() {
    for name in ENV_VARS {
        if name.ends_with("_HEADERS") {
            if let Ok(headers) = std::env::var(name) {
                register_header_list(&headers);
            }
        } else {
            register_env(name);
        }
    }
}

/// The shortest value registered, in characters: shorter ones are ignored.
pub const MIN_LEN: usize = 8;

/// The registered values, longest first (so a secret that starts another is not matched
/// inside it), and which bytes start one.
struct Set {
    values: Vec<String>,
    first: [bool; 256],
}

/// Whether any value is registered: the only work [`redact`] does when none is.
static ANY: AtomicBool = AtomicBool::new(false);
static SET: RwLock<Option<Arc<Set>>> = RwLock::new(None);

/// Registers `value` (trimmed) as a secret of this process; ignored when shorter than
/// [`MIN_LEN`] characters. Its JSON-escaped form is registered too when it differs, so that it
/// is also found in JSON text.
pub fn register(value: &str) {
    let value = value.trim();
    if value.chars().count() < MIN_LEN {
        return;
    }
    let mut forms = vec![value.to_owned()];
    if let Ok(json) = serde_json::to_string(value) {
        let escaped = &json[1..json.len() - 1];
        if escaped != value {
            forms.push(escaped.to_owned());
        }
    }
    let mut guard = SET.write().unwrap_or_else(PoisonError::into_inner);
    let mut values = guard.as_ref().map(|s| s.values.clone()).unwrap_or_default();
    let before = values.len();
    for form in forms {
        if !values.contains(&form) {
            values.push(form);
        }
    }
    if values.len() == before {
        return;
    }
    values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    let mut first = [false; 256];
    for v in &values {
        if let Some(&b) = v.as_bytes().first() {
            first[usize::from(b)] = true;
        }
    }
    *guard = Some(Arc::new(Set { values, first }));
    ANY.store(true, Ordering::Release);
}

/// Reads the environment variable `name` and registers its value as a secret (see
/// [`register`]); returns the value, if set.
pub fn register_env(name: &str) -> Option<String> {
    let value = std::env::var(name).ok()?;
    register(&value);
    Some(value)
}

/// Registers the values of a header list written `name=value,name=value` (as
/// `OTEL_EXPORTER_OTLP_HEADERS` is), each value and the whole text.
pub fn register_header_list(text: &str) {
    register(text);
    for pair in text.split(',') {
        if let Some((_, value)) = pair.split_once('=') {
            register(value);
            // `Bearer TOKEN`, `Basic CREDENTIALS`: the credential alone too.
            if let Some((_, credential)) = value.trim().rsplit_once(' ') {
                register(credential);
            }
        }
    }
}

/// Whether an environment variable's name says it holds a secret (`API_KEY`, `GITHUB_TOKEN`,
/// `DB_PASSWORD`, `CLIENT_SECRET`, `AUTH`, `CREDENTIALS`, `PRIVATE_KEY`...).
pub fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASS", "AUTH", "CREDENTIAL", "PRIVATE", "COOKIE", "SESSION"]
        .iter()
        .any(|word| name.contains(word))
}

/// Whether any secret is registered.
pub fn active() -> bool {
    ANY.load(Ordering::Acquire)
}

fn current() -> Option<Arc<Set>> {
    if !active() {
        return None;
    }
    SET.read().unwrap_or_else(PoisonError::into_inner).clone()
}

/// `text` with every registered secret replaced by [`REDACTED`]; borrowed when none occurs.
pub fn redact(text: &str) -> Cow<'_, str> {
    match current() {
        Some(set) => redact_with(&set, text),
        None => Cow::Borrowed(text),
    }
}

fn redact_with<'t>(set: &Set, text: &'t str) -> Cow<'t, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let (mut copied, mut i) = (0, 0);
    while i < bytes.len() {
        if set.first[usize::from(bytes[i])]
            && let Some(found) = set.values.iter().find(|v| bytes[i..].starts_with(v.as_bytes()))
        {
            // `i` starts a UTF-8 sequence (a secret's first byte does) and the match ends
            // where the secret does: both are character boundaries.
            let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
            out.push_str(&text[copied..i]);
            out.push_str(REDACTED);
            i += found.len();
            copied = i;
            continue;
        }
        i += 1;
    }
    match out {
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    }
}

/// Redacts `text` in place; returns whether it changed.
pub fn redact_string(text: &mut String) -> bool {
    match redact(text) {
        Cow::Borrowed(_) => false,
        Cow::Owned(redacted) => {
            *text = redacted;
            true
        }
    }
}

/// Redacts every string of `value` (object keys too) in place; returns whether any changed.
pub fn redact_json(value: &mut serde_json::Value) -> bool {
    match current() {
        Some(set) => redact_value(&set, value),
        None => false,
    }
}

fn redact_value(set: &Set, value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::String(s) => match redact_with(set, s) {
            Cow::Borrowed(_) => false,
            Cow::Owned(redacted) => {
                *s = redacted;
                true
            }
        },
        Value::Array(items) => items.iter_mut().fold(false, |c, v| redact_value(set, v) | c),
        Value::Object(map) => {
            let keys_hit = map.keys().any(|k| matches!(redact_with(set, k), Cow::Owned(_)));
            if keys_hit {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    redact_value(set, &mut v);
                    map.insert(redact_with(set, &k).into_owned(), v);
                }
                return true;
            }
            map.values_mut().fold(false, |c, v| redact_value(set, v) | c)
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// `value` with every string redacted, through its JSON form; `value` unchanged (and no work
/// done beyond one serialisation) when it holds no secret. A value that does not read back
/// once redacted (a secret inside a field with a fixed form) is `Err` with the redacted JSON.
pub fn redact_serde<T>(value: T) -> Result<T, serde_json::Value>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let Some(set) = current() else { return Ok(value) };
    let Ok(mut json) = serde_json::to_value(&value) else { return Ok(value) };
    if !redact_value(&set, &mut json) {
        return Ok(value);
    }
    serde_json::from_value(json.clone()).map_err(|_| json)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    // The set is global to the process: each test registers its own values.

    #[test]
    fn registered_values_are_redacted_wherever_they_occur() {
        register("alpha-secret-0001");
        register("alpha-secret-0001-longer");
        assert_eq!(redact("x alpha-secret-0001 y"), "x [redacted] y");
        // The longer value wins where both start.
        assert_eq!(redact("alpha-secret-0001-longer!"), "[redacted]!");
        assert_eq!(
            redact("alpha-secret-0001alpha-secret-0001"),
            "[redacted][redacted]",
            "adjacent occurrences"
        );
        assert!(matches!(redact("nothing here, alpha-secret"), Cow::Borrowed(_)));
        // Multi-byte text around a secret stays whole.
        assert_eq!(redact("é alpha-secret-0001 ü"), "é [redacted] ü");
    }

    #[test]
    fn short_values_are_ignored_and_values_are_trimmed() {
        register("seven77");
        assert_eq!(redact("seven77"), "seven77");
        register("  beta-secret-0002\n");
        assert_eq!(redact("beta-secret-0002"), "[redacted]");
    }

    #[test]
    fn json_is_redacted_in_strings_keys_and_escaped_forms() {
        register("gamma\"secret\\0003");
        let mut v = serde_json::json!({
            "out": "gamma\"secret\\0003 here",
            "gamma\"secret\\0003": [1, "a gamma\"secret\\0003"],
        });
        assert!(redact_json(&mut v));
        assert_eq!(
            v,
            serde_json::json!({"out": "[redacted] here", "[redacted]": [1, "a [redacted]"]})
        );
        let text = serde_json::to_string(&serde_json::json!({"k": "gamma\"secret\\0003"})).unwrap();
        assert_eq!(redact(&text), r#"{"k":"[redacted]"}"#);
    }

    #[test]
    fn header_lists_register_each_value() {
        register_header_list("authorization=Bearer delta-0004-token,x-other=epsilon-0005-v");
        assert_eq!(
            redact("Bearer delta-0004-token, delta-0004-token and epsilon-0005-v"),
            "[redacted], [redacted] and [redacted]"
        );
    }

    #[test]
    fn secret_names() {
        for name in ["OPENAI_API_KEY", "github_token", "DB_PASSWORD", "CLIENT_SECRET", "AUTH"] {
            assert!(looks_secret(name), "{name}");
        }
        for name in ["PATH", "HOME", "LANG", "RUST_LOG"] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    /// The chokepoints: an audit record is stored redacted and its chain verifies; a tool's
    /// output (a file read) comes back redacted.
    #[tokio::test]
    async fn audit_records_and_tool_outputs_are_redacted() {
        use crate::{AuditEvent, AuditRecord, GENESIS_HASH, verify_chain};
        register("eta-secret-0007-key");
        let event = AuditEvent::ToolCall {
            tool: "shell".into(),
            args: serde_json::json!({"command": "echo eta-secret-0007-key"}),
            success: true,
            summary: "eta-secret-0007-key\n".into(),
        };
        let record =
            AuditRecord::new(0, agent_state::Timestamp(1), "bottom-1".into(), event, GENESIS_HASH);
        let json = serde_json::to_string(&record).unwrap();
        assert!(!json.contains("eta-secret-0007-key"), "{json}");
        assert!(json.contains("echo [redacted]") && json.contains("[redacted]\\n"), "{json}");
        assert_eq!(verify_chain(&[record]).unwrap(), 1);

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("notes.txt"), "the key: eta-secret-0007-key\n").unwrap();
        let ctx = crate::tools::ToolContext::new(dir.path()).unwrap();
        let tools = crate::tools::ToolRegistry::with_builtins();
        let out =
            tools.call(&ctx, "read_file", serde_json::json!({"path": "notes.txt"})).await.unwrap();
        assert!(out.output.contains("the key: [redacted]"), "{}", out.output);
        assert!(!out.output.contains("eta-secret") && !out.data.to_string().contains("eta-secret"));
    }

    #[test]
    fn typed_values_are_redacted_through_json() {
        register("zeta-secret-0006");
        let out: (String, u32) = redact_serde(("say zeta-secret-0006".to_owned(), 3)).unwrap();
        assert_eq!(out, ("say [redacted]".to_owned(), 3));
    }
}
