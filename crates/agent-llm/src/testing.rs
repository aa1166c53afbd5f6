//! Test kit (feature `testing`): a fake OpenAI-compatible model on a loopback HTTP server, and
//! the scripted goal scenario that drives a whole goal-driven team through it.
//!
//! - [`FakeModel`] is a minimal HTTP/1.1 server on `127.0.0.1` that answers `GET /v1/models`
//!   (listing the one model it was given, as [`OpenAiProvider`](crate::OpenAiProvider)'s
//!   preflight expects) and `POST /v1/chat/completions` with whatever its handler makes of the
//!   request body. Point an `OpenAiConfig::base_url` (or a team file's `base_url`) at
//!   [`FakeModel::url`].
//! - [`add_program_scenario`] is such a handler: the model of a team that writes and tests a
//!   small shell program. It answers from the request body alone, so it serves any number of
//!   agents asking at once, and a run that is killed and resumed.
//! - Asked with `"stream": true`, it streams the handler's answer as OpenAI's chunk events,
//!   in the [`StreamStyle`] set with [`FakeModel::set_stream_style`]: whole and well formed
//!   by default, or without usage, hanging mid-stream, malformed mid-stream, or not streamed.
//! - [`text_completion`] and [`tool_call_completion`] build the OpenAI response bodies a
//!   handler returns; [`decision_of`] and [`speaker_of`] read what a request asks and who asks.
//!
//! ```
//! use agent_llm::testing::{FakeModel, text_completion};
//! use serde_json::json;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let model = FakeModel::start("fake-model", |_body| {
//!     Ok(text_completion("fake-model", &json!({"verdict": "sign", "reason": "fine"})))
//! })
//! .await
//! .unwrap();
//! assert!(model.url().starts_with("http://127.0.0.1:") && model.url().ends_with("/v1"));
//! assert_eq!(model.chat_requests(), 0);
//! assert!(model.problems().is_empty());
//! # });
//! ```

mod scenario;
mod server;
mod stream;

pub use scenario::{
    USAGE_COMPLETION_TOKENS, USAGE_PROMPT_TOKENS, add_program_scenario, decision_of, speaker_of,
    text_completion, tool_call_completion,
};
pub use server::{FakeModel, Handler};
pub use stream::{PIECE_CHARS, StreamStyle};
