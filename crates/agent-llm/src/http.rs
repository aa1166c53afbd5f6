//! Plumbing shared by the HTTP providers ([`crate::OpenAiProvider`], [`crate::AnthropicProvider`]):
//! configuration checks, one POST of a JSON body, and the classification of what can go wrong
//! (transport failures and HTTP statuses) onto [`ProviderErrorKind`], including `Retry-After`.
//!
//! **A whole answer's time limit.** A call answered whole (not streamed) shows nothing until it
//! ends, so neither its `timeout` nor the runtime's silence limit (`[timeouts] silence_ms`) can
//! tell a server still generating from a wedged one. Such a call may take its `timeout` plus
//! twice the time its `max_tokens` take at the slowest generation rate this client has measured
//! (completion tokens over the whole call's time, on answers of at least
//! [`PACE_MIN_TOKENS`] tokens), or at [`ASSUMED_TOKENS_PER_SECOND`] before it has measured one
//! (a request without `max_tokens` counts [`UNSTATED_MAX_TOKENS`]). The call tells the agent's
//! turn so (`agent_core::progress::expect_quiet`): it answers its heartbeats busy meanwhile,
//! and its silence counts from that limit. On 2 cores, llama-cpp-python's server answered a
//! 2 048-token planning request whole in 140 s (999 tokens: 7 tokens a second over the whole
//! call): with the default 120 s `timeout`, before anything was measured, its limit is
//! 120 + 2 × 2 048 / 8 = 632 s; at the measured 7 tokens a second, 705 s.
//!
//! Secrets stay out of messages: the key travels in a header marked sensitive, is never logged,
//! and is replaced by `[redacted]` should a server echo it in an error message.

use std::error::Error as _;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use reqwest::{StatusCode, Url};
use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::provider::{ProviderError, ProviderErrorKind};

mod stream;

pub(crate) use stream::Streamed;

/// An HTTP provider's configuration was refused when the provider was built. The message names
/// the setting and says how to fix it; it never contains the API key.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `base_url` is not an absolute `http` or `https` URL.
    #[error("base_url `{url}`: {reason}; write it like {example}")]
    BaseUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
        /// A correct URL for this provider.
        example: &'static str,
    },
    /// `model` is empty.
    #[error("model: empty; name the model the server serves, such as `{example}`")]
    EmptyModel {
        /// A model name for this provider.
        example: &'static str,
    },
    /// `timeout` is zero.
    #[error("timeout: zero; give the longest one call may take, such as 120 s")]
    ZeroTimeout,
    /// `api_key` cannot travel in an HTTP header.
    #[error(
        "api_key: not usable in an HTTP header (it holds a control character); copy the key again"
    )]
    ApiKey,
    /// `structured_output` names a mode the provider cannot send.
    #[error("{0}")]
    StructuredOutput(String),
    /// The HTTP client could not be built (TLS roots, ...).
    #[error("http client: {0}")]
    Client(String),
}

/// The generation rate assumed for a whole answer before one was measured, in tokens a second:
/// about what the embedded Gemma 3 270M writes on 2 cores in a debug build (7.8).
pub(crate) const ASSUMED_TOKENS_PER_SECOND: u64 = 8;
/// The `max_tokens` counted for a request that leaves it to the server.
pub(crate) const UNSTATED_MAX_TOKENS: u64 = 2_048;
/// The fewest completion tokens of a whole answer whose rate is measured: a shorter one is
/// mostly the time to read its prompt.
pub(crate) const PACE_MIN_TOKENS: u64 = 32;

/// The slowest generation rate measured on whole answers, in thousandths of a token a second
/// (`u64::MAX`: none measured yet).
#[derive(Debug)]
struct Pace(AtomicU64);

impl Default for Pace {
    fn default() -> Self {
        Self(AtomicU64::new(u64::MAX))
    }
}

impl Pace {
    /// How long a whole answer of at most `max_tokens` tokens may take beyond the call's
    /// timeout: twice their time at the slowest rate measured (see the module docs).
    fn allowance(&self, max_tokens: Option<u64>) -> Duration {
        let tokens = max_tokens.filter(|&t| t > 0).unwrap_or(UNSTATED_MAX_TOKENS);
        let rate = match self.0.load(Ordering::Relaxed) {
            u64::MAX => ASSUMED_TOKENS_PER_SECOND * 1_000,
            measured => measured.max(1),
        };
        // 2 × tokens / (rate / 1 000) seconds, in milliseconds.
        Duration::from_millis(tokens.saturating_mul(2_000_000) / rate)
    }

    /// A whole answer of `tokens` completion tokens took `took`.
    fn record(&self, tokens: u64, took: Duration) {
        let millis = u64::try_from(took.as_millis()).unwrap_or(u64::MAX).max(1);
        if tokens >= PACE_MIN_TOKENS {
            let rate = tokens.saturating_mul(1_000_000) / millis;
            self.0.fetch_min(rate, Ordering::Relaxed);
        }
    }
}

/// One provider's HTTP client: where to POST, with which headers, and how to report failures.
pub(crate) struct HttpClient {
    provider: &'static str,
    model: String,
    endpoint: Url,
    headers: HeaderMap,
    secret: Option<String>,
    timeout: Duration,
    client: reqwest::Client,
    /// The slowest generation rate of its whole answers.
    pace: Pace,
}

/// Longest provider error message kept in a [`ProviderError`], in characters.
const MAX_DETAIL_CHARS: usize = 300;

impl HttpClient {
    /// A client POSTing to `endpoint` with `headers` (which hold `secret`, if any, marked
    /// sensitive), giving up on a call after `timeout`. No system proxy is used.
    pub(crate) fn new(
        provider: &'static str,
        model: String,
        endpoint: Url,
        headers: HeaderMap,
        secret: Option<String>,
        timeout: Duration,
    ) -> Result<Self, ConfigError> {
        if timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .build()
            .map_err(|e| ConfigError::Client(error_chain(&e)))?;
        Ok(Self {
            provider,
            model,
            endpoint,
            headers,
            secret,
            timeout,
            client,
            pace: Pace::default(),
        })
    }

    /// The provider's name.
    pub(crate) fn provider(&self) -> &'static str {
        self.provider
    }

    /// The model.
    pub(crate) fn model(&self) -> &str {
        &self.model
    }

    /// Where requests go.
    pub(crate) fn endpoint(&self) -> &Url {
        &self.endpoint
    }

    /// POSTs `body` as JSON and reads a 2xx answer, sent whole, as `T` (`generated` tells its
    /// completion tokens); anything else is a classified error. The call may take its timeout
    /// plus the time its `max_tokens` may take (see the module docs), which the agent's turn is
    /// told.
    pub(crate) async fn post<T: DeserializeOwned>(
        &self,
        body: &serde_json::Value,
        generated: impl FnOnce(&T) -> u64,
    ) -> Result<T, ProviderError> {
        self.post_to(&self.endpoint, body, generated).await
    }

    /// [`Self::post`] to another endpoint of the same server (`url`), with the same headers.
    pub(crate) async fn post_to<T: DeserializeOwned>(
        &self,
        url: &Url,
        body: &serde_json::Value,
        generated: impl FnOnce(&T) -> u64,
    ) -> Result<T, ProviderError> {
        let max_tokens = body.get("max_tokens").and_then(serde_json::Value::as_u64);
        let limit = self.timeout.saturating_add(self.pace.allowance(max_tokens));
        let _quiet = agent_core::progress::expect_quiet(limit);
        let started = Instant::now();
        let result = self.exchange(url, body, limit).await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let (status, retry_after, bytes) = match result {
            Ok(answer) => answer,
            Err(error) => {
                tracing::debug!(
                    provider = self.provider,
                    model = %self.model,
                    kind = ?error.kind,
                    elapsed_ms,
                    error = %error.message,
                    "provider call failed"
                );
                return Err(error);
            }
        };
        tracing::debug!(
            provider = self.provider,
            model = %self.model,
            status = status.as_u16(),
            elapsed_ms,
            bytes = bytes.len(),
            "provider call answered"
        );
        if !status.is_success() {
            return Err(self.status_error(url, status, retry_after, &bytes));
        }
        let answer: T = serde_json::from_slice(&bytes).map_err(|e| {
            self.error(
                ProviderErrorKind::BadResponse,
                format!(
                    "HTTP {status}: not the expected wire format ({e}): {}",
                    truncate(&self.redact(snippet(&bytes)))
                ),
            )
        })?;
        self.pace.record(generated(&answer), started.elapsed());
        Ok(answer)
    }

    /// GETs the model list at `url` (`{"data": [{"id": ...}]}`, as OpenAI and Anthropic
    /// answer). `None` when the server has no such endpoint (404, 405).
    pub(crate) async fn list_models(&self, url: Url) -> Result<Option<Vec<String>>, ProviderError> {
        #[derive(serde::Deserialize)]
        struct List {
            data: Vec<Entry>,
        }
        #[derive(serde::Deserialize)]
        struct Entry {
            id: String,
        }
        let response = self
            .client
            .get(url.clone())
            .headers(self.headers.clone())
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if matches!(status.as_u16(), 404 | 405) {
            return Ok(None);
        }
        let retry_after = retry_after(response.headers());
        let bytes = response.bytes().await.map_err(|e| self.transport_error(&e))?;
        if !status.is_success() {
            return Err(self.status_error(&url, status, retry_after, &bytes));
        }
        match serde_json::from_slice::<List>(&bytes) {
            Ok(list) => Ok(Some(list.data.into_iter().map(|e| e.id).collect())),
            // A server whose list is not in this shape cannot tell us anything.
            Err(_) => Ok(None),
        }
    }

    /// Fails with [`ProviderErrorKind::UnknownModel`] if the server at `url` lists its models
    /// and this client's model is not among them.
    pub(crate) async fn check_model_listed(&self, url: Url) -> Result<(), ProviderError> {
        let Some(ids) = self.list_models(url.clone()).await? else {
            return Ok(());
        };
        if ids.iter().any(|id| id == &self.model) {
            return Ok(());
        }
        let shown: Vec<&str> = ids.iter().take(8).map(String::as_str).collect();
        Err(self.error(
            ProviderErrorKind::UnknownModel,
            format!(
                "the server at {url} does not serve this model; it serves {} model(s){}{}; check `model` in the team file",
                ids.len(),
                if shown.is_empty() { "" } else { ", such as " },
                shown.join(", ")
            ),
        ))
    }

    /// An error of `kind` with `message`, the key redacted should it appear.
    pub(crate) fn error(
        &self,
        kind: ProviderErrorKind,
        message: impl Into<String>,
    ) -> ProviderError {
        ProviderError {
            provider: self.provider.to_owned(),
            model: self.model.clone(),
            kind,
            message: self.redact(message.into()),
            retry_after: None,
        }
    }

    /// `text` with every occurrence of the key replaced by `[redacted]`.
    fn redact(&self, text: String) -> String {
        match self.secret.as_deref().filter(|s| !s.is_empty()) {
            Some(secret) if text.contains(secret) => text.replace(secret, "[redacted]"),
            _ => text,
        }
    }

    /// Sends the request and reads the whole answer within `limit`: its status, `Retry-After`
    /// and body, or a transport error.
    async fn exchange(
        &self,
        url: &Url,
        body: &serde_json::Value,
        limit: Duration,
    ) -> Result<(StatusCode, Option<Duration>, Vec<u8>), ProviderError> {
        let body = serde_json::to_vec(body).map_err(|e| {
            self.error(ProviderErrorKind::BadRequest, format!("cannot encode the request: {e}"))
        })?;
        let response = self
            .client
            .post(url.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .timeout(limit)
            .body(body)
            .send()
            .await
            .map_err(|e| self.transport_error_within(&e, limit))?;
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let bytes = response.bytes().await.map_err(|e| self.transport_error_within(&e, limit))?;
        let bytes = Vec::from(bytes);
        Ok((status, retry_after, bytes))
    }

    /// Classifies a failure to send the request or to read the answer.
    fn transport_error(&self, error: &reqwest::Error) -> ProviderError {
        self.transport_error_within(error, self.timeout)
    }

    /// Classifies a failure to send the request or to read the answer, given `limit`.
    fn transport_error_within(&self, error: &reqwest::Error, limit: Duration) -> ProviderError {
        let chain = error_chain(error);
        if error.is_timeout() {
            self.error(ProviderErrorKind::Timeout, format!("no answer within {limit:?}: {chain}"))
        } else if error.is_builder() {
            self.error(ProviderErrorKind::BadRequest, chain)
        } else {
            self.error(ProviderErrorKind::Connection, chain)
        }
    }

    /// Classifies a non-2xx answer.
    fn status_error(
        &self,
        url: &Url,
        status: StatusCode,
        retry_after: Option<Duration>,
        body: &[u8],
    ) -> ProviderError {
        let detail = ErrorDetail::parse(body);
        // Redact before cutting: a cut could leave a prefix of the key that no longer matches.
        let text = truncate(&self.redact(detail.message.clone().unwrap_or_else(|| snippet(body))));
        // The class comes from the one classification (`FailureKind::from_http_status`); the
        // provider kinds only name the permanent ones more precisely.
        use agent_state::FailureKind;
        let kind = match (status.as_u16(), FailureKind::from_http_status(status.as_u16())) {
            (401, _) => ProviderErrorKind::Unauthorized,
            (403, _) => ProviderErrorKind::Forbidden,
            (404, _) => ProviderErrorKind::UnknownModel,
            (400, _) if detail.says_unknown_model() => ProviderErrorKind::UnknownModel,
            // A server that answers a request it cannot validate with a 5xx (llama-cpp-python
            // answers an unsupported `response_format` with HTTP 500 and pydantic's validation
            // errors): sending it again cannot help.
            (500 | 501, _) if says_invalid_request(&text) => ProviderErrorKind::BadRequest,
            (_, Some(FailureKind::RateLimited)) => ProviderErrorKind::RateLimited,
            (_, Some(FailureKind::Timeout)) => ProviderErrorKind::Timeout,
            (_, Some(FailureKind::Server)) => ProviderErrorKind::Server,
            (_, Some(_)) => ProviderErrorKind::BadRequest,
            (_, None) => ProviderErrorKind::BadResponse,
        };
        let message = if status == StatusCode::NOT_FOUND {
            format!("HTTP {status} from {url}: {text} (check the model name and base_url)")
        } else {
            format!("HTTP {status}: {text}")
        };
        ProviderError { retry_after, ..self.error(kind, message) }
    }
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("endpoint", &self.endpoint.as_str())
            .field("api_key", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The endpoint `path` under `base_url`, which must be an absolute http(s) URL without query or
/// fragment; `example` is a correct base URL for the error message.
pub(crate) fn endpoint(
    base_url: &str,
    path: &str,
    example: &'static str,
) -> Result<Url, ConfigError> {
    let refuse =
        |reason: String| ConfigError::BaseUrl { url: base_url.to_owned(), reason, example };
    let url = Url::parse(base_url.trim()).map_err(|e| refuse(format!("not a URL ({e})")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(refuse(format!("scheme `{}` is not http or https", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(refuse("no host".to_owned()));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(refuse("has a query or fragment".to_owned()));
    }
    let joined = format!("{}/{path}", url.as_str().trim_end_matches('/'));
    Url::parse(&joined).map_err(|e| refuse(format!("cannot append `{path}` ({e})")))
}

/// Refuses an empty model name.
pub(crate) fn check_model(model: &str, example: &'static str) -> Result<(), ConfigError> {
    if model.trim().is_empty() { Err(ConfigError::EmptyModel { example }) } else { Ok(()) }
}

/// The key to send: trimmed (keys read from files often end in a newline); empty means none.
pub(crate) fn api_key(key: Option<&str>) -> Option<String> {
    key.map(str::trim).filter(|k| !k.is_empty()).map(str::to_owned)
}

/// A header value holding a secret, marked sensitive so that reqwest never shows it.
pub(crate) fn secret_header(value: &str) -> Result<HeaderValue, ConfigError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ConfigError::ApiKey)?;
    value.set_sensitive(true);
    Ok(value)
}

/// `Debug` of a configured key: whether there is one, never its value.
pub(crate) fn redacted(key: Option<&String>) -> Option<&'static str> {
    key.map(|_| "<redacted>")
}

/// How long the server asks us to wait: `retry-after-ms` (milliseconds, a Microsoft/OpenAI
/// extension) if present and valid, else `Retry-After` in delta seconds (fractions accepted).
/// The HTTP-date form of `Retry-After` is not read: `None`.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    parse_retry_after(get("retry-after"), get("retry-after-ms"))
}

/// [`retry_after`] on the header values.
fn parse_retry_after(retry_after: Option<&str>, retry_after_ms: Option<&str>) -> Option<Duration> {
    let seconds = |value: &str| {
        let n: f64 = value.trim().parse().ok()?;
        (n.is_finite() && n >= 0.0).then_some(n)
    };
    retry_after_ms
        .and_then(seconds)
        .and_then(|ms| Duration::try_from_secs_f64(ms / 1_000.0).ok())
        .or_else(|| retry_after.and_then(seconds).and_then(|s| Duration::try_from_secs_f64(s).ok()))
}

/// The provider's own explanation in an error body. OpenAI, Anthropic and llama.cpp write
/// `{"error": {"message", "type", "code"}}`, Ollama `{"error": "..."}`, vLLM
/// `{"message", "type", "code"}` at the top level.
#[derive(Debug, Default)]
struct ErrorDetail {
    message: Option<String>,
    code: Option<String>,
}

impl ErrorDetail {
    fn parse(body: &[u8]) -> Self {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) else {
            return Self::default();
        };
        let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
        match value.get("error") {
            Some(serde_json::Value::String(message)) => {
                Self { message: Some(message.clone()), code: None }
            }
            Some(error) => {
                Self { message: text(error.get("message")), code: text(error.get("code")) }
            }
            None => Self { message: text(value.get("message")), code: text(value.get("code")) },
        }
    }

    /// Whether the provider says the model does not exist.
    fn says_unknown_model(&self) -> bool {
        if self.code.as_deref() == Some("model_not_found") {
            return true;
        }
        let message = self.message.as_deref().unwrap_or_default().to_lowercase();
        message.contains("model")
            && (message.contains("not found") || message.contains("does not exist"))
    }
}

/// Whether a server error's text is a validation error of the request (pydantic's, FastAPI's,
/// or a server saying so in words) rather than a failure of the server.
fn says_invalid_request(text: &str) -> bool {
    let text = text.to_lowercase();
    [
        "validation error",
        "input should be",
        "literal_error",
        "value_error",
        "extra_forbidden",
        "invalid request",
        "unprocessable",
        "not supported",
        "unsupported",
    ]
    .iter()
    .any(|marker| text.contains(marker))
}

/// A body as text, for messages.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() { "(empty body)".to_owned() } else { text.to_owned() }
}

/// `text` cut to [`MAX_DETAIL_CHARS`] characters.
fn truncate(text: &str) -> String {
    agent_state::shorten(text, MAX_DETAIL_CHARS)
}

/// `error` and its sources, joined by `: `.
fn error_chain(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !message.contains(&cause_text) {
            message.push_str(": ");
            message.push_str(&cause_text);
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{ErrorDetail, parse_retry_after, says_invalid_request, truncate};

    #[test]
    fn retry_after_reads_delta_seconds_and_fractions() {
        assert_eq!(parse_retry_after(Some("2"), None), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(Some(" 0.5 "), None), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after(Some("0"), None), Some(Duration::ZERO));
    }

    #[test]
    fn retry_after_ms_wins_when_valid() {
        assert_eq!(parse_retry_after(Some("2"), Some("1500")), Some(Duration::from_millis(1_500)));
        assert_eq!(parse_retry_after(Some("2"), Some("soon")), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(None, Some("20.5")), Some(Duration::from_micros(20_500)));
    }

    #[test]
    fn retry_after_ignores_dates_and_nonsense() {
        assert_eq!(parse_retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT"), None), None);
        assert_eq!(parse_retry_after(Some("-1"), None), None);
        assert_eq!(parse_retry_after(Some("NaN"), None), None);
        assert_eq!(parse_retry_after(Some("inf"), None), None);
        assert_eq!(parse_retry_after(Some("1e300"), None), None);
        assert_eq!(parse_retry_after(Some(""), None), None);
        assert_eq!(parse_retry_after(None, None), None);
    }

    #[test]
    fn error_detail_reads_every_dialect() {
        let openai =
            br#"{"error":{"message":"The model `x` does not exist","code":"model_not_found"}}"#;
        let detail = ErrorDetail::parse(openai);
        assert_eq!(detail.code.as_deref(), Some("model_not_found"));
        assert!(detail.says_unknown_model());
        let ollama = br#"{"error":"model 'x' not found, try pulling it first"}"#;
        assert!(ErrorDetail::parse(ollama).says_unknown_model());
        let vllm = br#"{"object":"error","message":"The model `x` does not exist.","code":404}"#;
        assert!(ErrorDetail::parse(vllm).says_unknown_model());
        let other = br#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}"#;
        let detail = ErrorDetail::parse(other);
        assert_eq!(detail.message.as_deref(), Some("max_tokens: too large"));
        assert!(!detail.says_unknown_model());
        assert!(ErrorDetail::parse(b"<html>").message.is_none());
    }

    #[test]
    fn validation_errors_in_a_server_error_are_recognised() {
        assert!(says_invalid_request(
            "[{'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}]"
        ));
        assert!(says_invalid_request("1 validation error for CreateChatCompletionRequest"));
        assert!(says_invalid_request("response_format json_schema is not supported"));
        assert!(!says_invalid_request("CUDA out of memory"));
        assert!(!says_invalid_request("internal server error"));
    }

    #[test]
    fn truncate_counts_characters() {
        let long = "é".repeat(400);
        let cut = truncate(&long);
        assert_eq!(cut.chars().count(), 301);
        assert!(cut.ends_with('…'));
        assert_eq!(truncate("short"), "short");
    }
}
