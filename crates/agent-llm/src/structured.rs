//! Structured output that adapts to the server: the ways a provider can ask for an answer that
//! matches a JSON Schema ([`StructuredMode`]), the setting that picks one or lets the provider
//! find the best the server takes ([`StructuredOutput`]), and what was chosen and why
//! ([`ModeChoice`], kept in the usage report and shown by `strata inspect RUN usage`).
//!
//! Servers that speak the OpenAI wire format differ in what they accept: OpenAI and vLLM take
//! `response_format: json_schema`, llama-cpp-python only `json_object` with a `schema`, others
//! only forced tool calls, some nothing but text. With [`StructuredOutput::Auto`] a provider
//! starts with the best mode it knows and, when the server refuses a request *because of* its
//! format (`adapt::names_format`), moves on to the next one at once: not a retry, not a failure.
//! Whatever mode is used, the reasoner checks the answer against the schema and has an invalid
//! one repaired (see `reasoner.rs`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// One way of asking for a JSON answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredMode {
    /// `response_format: {"type": "json_schema", "json_schema": {name, schema}}` (OpenAI, vLLM,
    /// LM Studio, Ollama, llama.cpp's `llama-server`).
    JsonSchema,
    /// `response_format: {"type": "json_object", "schema": {...}}` (llama-cpp-python; a server
    /// that ignores `schema` still answers JSON, checked against the schema by the reasoner).
    JsonObject,
    /// One function tool whose parameters are the schema, forced with `tool_choice` naming it;
    /// its arguments are the answer (Anthropic's native way; OpenAI-compatible servers with tool
    /// calling).
    ToolCall,
    /// No format parameter: the schema is written into the system prompt and the answer is
    /// checked and repaired like any other. Works with any server.
    Prompt,
}

impl StructuredMode {
    /// Every mode, best first: the order [`StructuredOutput::Auto`] tries them in.
    pub const ALL: [StructuredMode; 4] =
        [Self::JsonSchema, Self::JsonObject, Self::ToolCall, Self::Prompt];

    /// The name used in team files and reports: `json_schema`, `json_object`, `tool_call`,
    /// `prompt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::JsonSchema => "json_schema",
            Self::JsonObject => "json_object",
            Self::ToolCall => "tool_call",
            Self::Prompt => "prompt",
        }
    }
}

impl fmt::Display for StructuredMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a provider asks for structured answers: `[reasoner] structured_output` in a team file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StructuredOutput {
    /// The best mode the server takes, found by trying them in [`StructuredMode::ALL`] order
    /// (among those the provider supports) and moving on when the server refuses one.
    #[default]
    Auto,
    /// This mode only; a server that refuses it fails the call (and the pre-run check).
    Only(StructuredMode),
}

impl StructuredOutput {
    /// The name used in team files: `auto` or a mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Only(mode) => mode.as_str(),
        }
    }
}

impl fmt::Display for StructuredOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `structured_output` value that names no mode.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error(
    "unknown structured output mode `{0}`; write \"auto\" (the default: the best mode the server takes), \"json_schema\", \"json_object\", \"tool_call\" or \"prompt\""
)]
pub struct UnknownMode(pub String);

impl FromStr for StructuredOutput {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "auto" {
            return Ok(Self::Auto);
        }
        StructuredMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .map(Self::Only)
            .ok_or_else(|| UnknownMode(s.to_owned()))
    }
}

/// A mode the server refused, and its answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedMode {
    /// The mode.
    pub mode: StructuredMode,
    /// What the server said (status and its message).
    pub reason: String,
}

/// The structured output mode a provider uses, and the modes it gave up on to get there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModeChoice {
    /// The setting (`auto` or a mode).
    pub setting: String,
    /// The mode in use; `None` when the server refused every mode it was offered.
    pub mode: Option<StructuredMode>,
    /// The modes refused, in the order they were tried.
    pub rejected: Vec<RejectedMode>,
    /// Whether calls that must use a tool are asked as structured questions, because the
    /// server answered `tool_choice: "required"` without a tool call (see `emulated_tools.rs`).
    #[serde(default)]
    pub tool_calls_emulated: bool,
    /// Whether answers are not streamed, because the server streamed one without its usage
    /// (llama-cpp-python ignores `stream_options`); every call is then counted exactly.
    #[serde(default)]
    pub stream_without_usage: bool,
    /// For a provider asked to prompt a base model (`OpenAiConfig::completions`): whether its
    /// requests go to `/completions` as transcripts under a grammar (`Some(true)`), or, since
    /// the server has no such endpoint or ignores the grammar, to chat completions
    /// (`Some(false)`). `None`: not asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<bool>,
}

impl fmt::Display for ModeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mode {
            Some(mode) => write!(f, "{mode} ({})", self.setting)?,
            None => write!(f, "none ({})", self.setting)?,
        }
        for (i, r) in self.rejected.iter().enumerate() {
            f.write_str(if i == 0 { "; refused: " } else { "; " })?;
            write!(f, "{} ({})", r.mode, r.reason)?;
        }
        if self.stream_without_usage {
            f.write_str("; answers not streamed (the server streams without the usage)")?;
        }
        match self.completions {
            Some(true) => f.write_str("; transcripts on /completions under a grammar")?,
            Some(false) => {
                f.write_str("; chat completions (the server's /completions takes no grammar)")?
            }
            None => {}
        }
        if self.tool_calls_emulated {
            f.write_str(
                "; tool calls asked as JSON (the server ignores tool_choice \"required\")",
            )?;
        }
        Ok(())
    }
}

#[cfg(feature = "http")]
mod adapt;
mod order;

#[cfg(feature = "http")]
pub(crate) use order::schema_text;
pub(crate) use order::value_text;

#[cfg(feature = "http")]
pub(crate) use adapt::{
    ModeSelector, check_supported, complete_adapting, unfenced, with_schema_instruction,
};

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

    use super::*;

    #[test]
    fn setting_parses_every_mode_and_refuses_others() {
        assert_eq!("auto".parse(), Ok(StructuredOutput::Auto));
        for mode in StructuredMode::ALL {
            assert_eq!(mode.as_str().parse(), Ok(StructuredOutput::Only(mode)));
        }
        let error = "json".parse::<StructuredOutput>().unwrap_err();
        assert!(error.to_string().contains("`json`") && error.to_string().contains("\"auto\""));
    }
}
