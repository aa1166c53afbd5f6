//! How an HTTP provider adapts its structured requests to the server (feature `http`): the
//! [`ModeSelector`] that moves on when the server refuses a format, the request loop
//! ([`complete_adapting`]), and the text fixes for modes whose answers the server does not
//! enforce ([`with_schema_instruction`], [`unfenced`]).

use std::sync::Mutex;

use super::*;
use crate::provider::{ProviderError, ProviderErrorKind};

/// A provider's mode state: which modes it may use, which the server refused. Shared by every
/// call of the provider (one per run), so a mode refused once is not offered again.
#[derive(Debug)]
pub(crate) struct ModeSelector {
    setting: StructuredOutput,
    /// The modes to try, best first.
    candidates: Vec<StructuredMode>,
    state: Mutex<SelectorState>,
}

#[derive(Debug, Default)]
struct SelectorState {
    rejected: Vec<RejectedMode>,
    /// Tool calls are asked as structured questions.
    tools_emulated: bool,
}

impl ModeSelector {
    /// A selector for `setting` among the modes `supported` (best first). An explicit mode the
    /// provider does not support is the caller's to refuse (see [`check_supported`]).
    pub(crate) fn new(setting: StructuredOutput, supported: &[StructuredMode]) -> Self {
        let candidates = match setting {
            StructuredOutput::Auto => supported.to_vec(),
            StructuredOutput::Only(mode) => vec![mode],
        };
        Self { setting, candidates, state: Mutex::new(SelectorState::default()) }
    }

    /// Whether a refused mode moves on to the next one.
    pub(crate) fn adapts(&self) -> bool {
        self.setting == StructuredOutput::Auto
    }

    /// The mode to use now: the first candidate not refused; `None` when all were.
    pub(crate) fn current(&self) -> Option<StructuredMode> {
        let state = self.lock();
        self.candidates.iter().copied().find(|m| !state.rejected.iter().any(|r| r.mode == *m))
    }

    /// Records that the server refused `mode` with `reason`; returns the next mode to try.
    pub(crate) fn reject(&self, mode: StructuredMode, reason: String) -> Option<StructuredMode> {
        {
            let mut state = self.lock();
            if !state.rejected.iter().any(|r| r.mode == mode) {
                state.rejected.push(RejectedMode { mode, reason });
            }
        }
        self.current()
    }

    /// Whether tool calls are asked as structured questions.
    pub(crate) fn tools_emulated(&self) -> bool {
        self.lock().tools_emulated
    }

    /// From now on, asks tool calls as structured questions.
    pub(crate) fn emulate_tools(&self) {
        self.lock().tools_emulated = true;
    }

    /// Takes over what another selector (the pre-run check's, or a stored report) learned:
    /// its refusals, when the setting is the same.
    pub(crate) fn remember(&self, choice: &ModeChoice) {
        if choice.setting != self.setting.as_str() {
            return;
        }
        let mut state = self.lock();
        state.tools_emulated |= choice.tool_calls_emulated;
        for r in &choice.rejected {
            if !state.rejected.iter().any(|known| known.mode == r.mode) {
                state.rejected.push(r.clone());
            }
        }
    }

    /// What is in use and what was refused.
    pub(crate) fn choice(&self) -> ModeChoice {
        let (rejected, tool_calls_emulated) = {
            let state = self.lock();
            (state.rejected.clone(), state.tools_emulated)
        };
        ModeChoice {
            setting: self.setting.as_str().to_owned(),
            mode: self.current(),
            rejected,
            tool_calls_emulated,
            stream_without_usage: false,
            completions: None,
        }
    }

    /// The error for a server that refused every mode tried: names what was tried and why.
    pub(crate) fn exhausted(&self, last: &ProviderError) -> ProviderError {
        let choice = self.choice();
        let tried: Vec<String> =
            choice.rejected.iter().map(|r| format!("{} ({})", r.mode, r.reason)).collect();
        let hint = if self.adapts() {
            "the server refused every structured output mode; check that it serves chat completions for this model"
        } else {
            "the server refused the structured output mode the team file sets; set `structured_output = \"auto\"` in the [reasoner] table to let Strata find one it takes"
        };
        ProviderError {
            kind: ProviderErrorKind::BadRequest,
            message: format!("{hint}; tried: {}", tried.join("; ")),
            retry_after: None,
            ..last.clone()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SelectorState> {
        // The state is a list and a flag, consistent after any panic that poisoned the lock.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether `error`, the answer to a structured request, refuses it *because of* its format:
/// a refusal of the request (HTTP 4xx other than authentication, a missing model or a rate
/// limit; or a 5xx that is a validation error of the request, see `http.rs`) whose message names
/// a format parameter (`response_format`, `json_schema`, `json_object`, `tool_choice`, `tools`,
/// `schema`, `grammar`, ...). Such an error is not transient and says nothing about the next
/// mode, so [`StructuredOutput::Auto`] moves on.
pub(crate) fn names_format(error: &ProviderError) -> bool {
    if error.kind != ProviderErrorKind::BadRequest {
        return false;
    }
    let message = error.message.to_lowercase();
    const WORDS: [&str; 11] = [
        "response_format",
        "response format",
        "json_schema",
        "json_object",
        "json schema",
        "tool_choice",
        "tools",
        "function",
        "schema",
        "grammar",
        "structured",
    ];
    WORDS.iter().any(|w| message.contains(w))
}

/// Sends a JSON request in the mode `modes` says, moving on to the next mode when the server
/// refuses one because of its format (only with [`StructuredOutput::Auto`]); any other error is
/// returned as it is. `send` makes one attempt in the given mode.
pub(crate) async fn complete_adapting<F, Fut>(
    modes: &ModeSelector,
    provider: &str,
    model: &str,
    mut send: F,
) -> Result<crate::ChatResponse, ProviderError>
where
    F: FnMut(StructuredMode) -> Fut,
    Fut: std::future::Future<Output = Result<crate::ChatResponse, ProviderError>>,
{
    loop {
        let Some(mode) = modes.current() else {
            let last = ProviderError {
                provider: provider.to_owned(),
                model: model.to_owned(),
                kind: ProviderErrorKind::BadRequest,
                message: String::new(),
                retry_after: None,
            };
            return Err(modes.exhausted(&last));
        };
        match send(mode).await {
            Ok(response) => return Ok(response),
            Err(error) if names_format(&error) => {
                // An explicit mode is the selector's only one: nothing comes next.
                let Some(next) = modes.reject(mode, error.message.clone()) else {
                    return Err(modes.exhausted(&error));
                };
                tracing::info!(
                    provider,
                    model,
                    refused = %mode,
                    next = %next,
                    reason = %error.message,
                    "the server refused this structured output mode; using the next one"
                );
            }
            Err(error) => return Err(error),
        }
    }
}

/// Refuses an explicit mode the provider cannot send.
pub(crate) fn check_supported(
    setting: StructuredOutput,
    provider: &'static str,
    supported: &[StructuredMode],
) -> Result<(), String> {
    match setting {
        StructuredOutput::Only(mode) if !supported.contains(&mode) => Err(format!(
            "structured_output `{mode}`: the {provider} provider cannot send it; use \"auto\" or one of: {}",
            supported.iter().map(|m| format!("\"{m}\"")).collect::<Vec<_>>().join(", ")
        )),
        _ => Ok(()),
    }
}

/// `system` with, for the modes in which the server does not enforce the schema itself, the
/// schema and how to answer.
pub(crate) fn with_schema_instruction(system: &str, schema: &serde_json::Value) -> String {
    let instruction = format!(
        "Answer with only a JSON value that matches this JSON Schema, with no other text and no code fences:\n{schema}"
    );
    if system.is_empty() { instruction } else { format!("{system}\n\n{instruction}") }
}

/// The JSON in a text answer: the text itself, or what a Markdown code fence around it holds
/// (models asked in the prompt often fence their JSON), with control characters written raw
/// inside its strings escaped ([`escape_raw_controls`]).
pub(crate) fn unfenced(text: &str) -> String {
    let trimmed = text.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return escape_raw_controls(trimmed);
    };
    // Drop the info string (`json`) up to the end of the first line, and the closing fence.
    let body = rest.split_once('\n').map_or("", |(_, body)| body);
    escape_raw_controls(body.trim_end().strip_suffix("```").unwrap_or(body).trim())
}

/// `text` with every control character inside a JSON string escaped (`\n`, `\t`, `\u0001`),
/// the rest unchanged. Valid JSON has none there, so a valid document is returned as it is;
/// an answer whose only fault is a raw newline in a string (llama-cpp-python's grammar for a
/// schema's `const` or `enum` string lets the model write one) becomes valid.
pub(crate) fn escape_raw_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string && !escaped && c.is_control() && u32::from(c) < 0x20 {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                other => out.push_str(&format!("\\u{:04x}", u32::from(other))),
            }
            continue;
        }
        out.push(c);
        if escaped {
            escaped = false;
        } else if in_string && c == '\\' {
            escaped = true;
        } else if c == '"' {
            in_string = !in_string;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

    use super::*;

    fn refused(kind: ProviderErrorKind, message: &str) -> ProviderError {
        ProviderError {
            provider: "openai".into(),
            model: "m".into(),
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    #[test]
    fn auto_moves_on_in_order_and_remembers() {
        let selector = ModeSelector::new(StructuredOutput::Auto, &StructuredMode::ALL);
        assert_eq!(selector.current(), Some(StructuredMode::JsonSchema));
        assert_eq!(
            selector.reject(StructuredMode::JsonSchema, "HTTP 500".into()),
            Some(StructuredMode::JsonObject)
        );
        assert_eq!(selector.current(), Some(StructuredMode::JsonObject));
        let choice = selector.choice();
        assert_eq!(choice.mode, Some(StructuredMode::JsonObject));
        assert_eq!(choice.rejected.len(), 1);
        assert!(choice.to_string().starts_with("json_object (auto); refused: json_schema"));
        // Another selector takes over what this one learned.
        let later = ModeSelector::new(StructuredOutput::Auto, &StructuredMode::ALL);
        later.remember(&choice);
        assert_eq!(later.current(), Some(StructuredMode::JsonObject));
        // All refused: none left.
        for mode in [StructuredMode::JsonObject, StructuredMode::ToolCall, StructuredMode::Prompt] {
            selector.reject(mode, "no".into());
        }
        assert_eq!(selector.current(), None);
        let error = selector.exhausted(&refused(ProviderErrorKind::BadRequest, "no"));
        assert!(error.message.contains("json_schema (HTTP 500)"), "{}", error.message);
        assert!(error.message.contains("prompt (no)"), "{}", error.message);
        assert!(!error.is_transient());
    }

    #[test]
    fn an_explicit_mode_is_the_only_one() {
        let selector = ModeSelector::new(
            StructuredOutput::Only(StructuredMode::ToolCall),
            &StructuredMode::ALL,
        );
        assert!(!selector.adapts());
        assert_eq!(selector.current(), Some(StructuredMode::ToolCall));
        assert_eq!(selector.reject(StructuredMode::ToolCall, "no".into()), None);
        // What an auto selector learned does not apply to an explicit one.
        let explicit = ModeSelector::new(
            StructuredOutput::Only(StructuredMode::JsonSchema),
            &StructuredMode::ALL,
        );
        explicit.remember(&ModeChoice {
            setting: "auto".into(),
            mode: Some(StructuredMode::JsonObject),
            rejected: vec![RejectedMode { mode: StructuredMode::JsonSchema, reason: "x".into() }],
            tool_calls_emulated: false,
            stream_without_usage: false,
            completions: None,
        });
        assert_eq!(explicit.current(), Some(StructuredMode::JsonSchema));
        assert!(
            check_supported(
                StructuredOutput::Only(StructuredMode::JsonObject),
                "anthropic",
                &[StructuredMode::ToolCall, StructuredMode::Prompt]
            )
            .unwrap_err()
            .contains("\"tool_call\", \"prompt\"")
        );
    }

    #[test]
    fn only_request_refusals_that_name_a_format_move_on() {
        let llama = "HTTP 500: [{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}]";
        assert!(names_format(&refused(ProviderErrorKind::BadRequest, llama)));
        assert!(names_format(&refused(
            ProviderErrorKind::BadRequest,
            "HTTP 400: 'response_format.type' must be 'json_schema'"
        )));
        assert!(names_format(&refused(
            ProviderErrorKind::BadRequest,
            "HTTP 400: tool_choice is not supported"
        )));
        // Not about the format, or not a refusal of the request.
        assert!(!names_format(&refused(
            ProviderErrorKind::BadRequest,
            "HTTP 400: max_tokens too large"
        )));
        assert!(!names_format(&refused(ProviderErrorKind::Server, "HTTP 502: response_format")));
        assert!(!names_format(&refused(
            ProviderErrorKind::Unauthorized,
            "HTTP 401: bad key for tools"
        )));
    }

    #[test]
    fn raw_control_characters_in_strings_are_escaped_and_nothing_else_changes() {
        let raw = "{\"content\": \"hello,\nstrata\t\u{1}\",\n \"q\": \"a\\\"b\\n\"}";
        let fixed = escape_raw_controls(raw);
        let value: serde_json::Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(value["content"], "hello,\nstrata\t\u{1}");
        assert_eq!(value["q"], "a\"b\n");
        let valid = "{\n  \"a\": [1, \"x\\ty\"]\n}";
        assert_eq!(escape_raw_controls(valid), valid, "a valid document is unchanged");
    }

    #[test]
    fn fences_are_taken_off() {
        assert_eq!(unfenced("```json\n{\"a\": 1}\n```"), "{\"a\": 1}");
        assert_eq!(unfenced("```\n{\"a\": 1}```"), "{\"a\": 1}");
        assert_eq!(unfenced("  {\"a\": 1} "), "{\"a\": 1}");
        assert_eq!(unfenced("```"), "");
    }
}
