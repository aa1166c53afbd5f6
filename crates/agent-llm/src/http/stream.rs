//! [`HttpClient::post_stream`]: one POST whose answer is read as a server-sent event stream
//! ([`crate::sse`]) as it arrives, with the same classification of failures as a whole answer.

use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, CONTENT_TYPE};

use super::{HttpClient, error_chain, retry_after, snippet, truncate};
use crate::provider::{ProviderError, ProviderErrorKind};
use crate::sse::{SseEvent, SseParser};

/// How a streamed POST ended.
pub(crate) enum Streamed {
    /// The event handler said the stream is complete (its last event came).
    Complete,
    /// The connection ended without the handler saying so: the stream was cut short, unless
    /// the wire format allows an end without a last event (the caller decides).
    Ended,
    /// The server answered 2xx with a whole body that is not an event stream (a server that
    /// ignores `stream: true`): the body, to read as a non-streamed answer.
    Whole(Vec<u8>),
}

/// The bound of a streamed exchange as a whole: a backstop (7 days, the longest time limit a
/// team may set) far past the team's reasoning limit, which bounds a call that keeps streaming.
/// The call's own timeout bounds each wait instead: for the answer to begin, and for each next
/// piece of it.
const STREAM_BACKSTOP: Duration = Duration::from_secs(7 * 24 * 3_600);

impl HttpClient {
    /// POSTs `body` as JSON and reads a 2xx `text/event-stream` answer event by event, handing
    /// each to `on_event` as soon as it is complete; `on_event` returns `Ok(true)` once the
    /// stream's last event came (the rest is not read), `Ok(false)` to read on, or the error
    /// that ends the call. A non-2xx answer is classified as [`HttpClient::post`] classifies it.
    ///
    /// The call's timeout bounds each wait, not the whole exchange: the answer must begin
    /// within it, and each next piece arrive within it of the last, so a slow model that keeps
    /// writing (a CPU model on 2 cores) is never cut while a server that stops sending
    /// mid-stream ends the call with [`ProviderErrorKind::Timeout`]. The team's reasoning limit
    /// bounds the call as a whole. A whole answer instead of a stream is bounded as
    /// [`HttpClient::post`] bounds one.
    pub(crate) async fn post_stream(
        &self,
        body: &serde_json::Value,
        on_event: &mut (dyn FnMut(SseEvent) -> Result<bool, ProviderError> + Send),
    ) -> Result<Streamed, ProviderError> {
        let started = Instant::now();
        let result = self.stream_exchange(body, on_event).await;
        let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        match &result {
            Ok(_) => tracing::debug!(
                provider = self.provider,
                model = %self.model,
                elapsed_ms,
                "provider stream answered"
            ),
            Err(error) => tracing::debug!(
                provider = self.provider,
                model = %self.model,
                kind = ?error.kind,
                elapsed_ms,
                error = %error.message,
                "provider stream failed"
            ),
        }
        result
    }

    async fn stream_exchange(
        &self,
        body: &serde_json::Value,
        on_event: &mut (dyn FnMut(SseEvent) -> Result<bool, ProviderError> + Send),
    ) -> Result<Streamed, ProviderError> {
        let body = serde_json::to_vec(body).map_err(|e| {
            self.error(ProviderErrorKind::BadRequest, format!("cannot encode the request: {e}"))
        })?;
        let started = Instant::now();
        let send = self
            .client
            .post(self.endpoint.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .timeout(STREAM_BACKSTOP)
            .body(body)
            .send();
        let mut response = tokio::time::timeout(self.timeout, send)
            .await
            .map_err(|_| self.silent("no answer"))?
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        let is_stream =
            response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(|v| {
                v.trim_start().to_ascii_lowercase().starts_with("text/event-stream")
            });
        if !status.is_success() || !is_stream {
            let retry_after = retry_after(response.headers());
            let left = self.timeout.saturating_sub(started.elapsed());
            let bytes = tokio::time::timeout(left, response.bytes())
                .await
                .map_err(|_| self.silent("no whole answer"))?
                .map_err(|e| self.transport_error(&e))?;
            if !status.is_success() {
                return Err(self.status_error(&self.endpoint, status, retry_after, &bytes));
            }
            return Ok(Streamed::Whole(bytes.to_vec()));
        }
        let mut parser = SseParser::default();
        let unreadable = |problem: String| {
            self.error(
                ProviderErrorKind::BadResponse,
                format!("an unreadable event stream: {problem}"),
            )
        };
        loop {
            let chunk = tokio::time::timeout(self.timeout, response.chunk())
                .await
                .map_err(|_| self.silent("the answer stopped arriving mid-stream: nothing more"))?
                .map_err(|e| self.stream_error(&e))?;
            let events = match &chunk {
                Some(bytes) => parser.feed(bytes).map_err(unreadable)?,
                None => parser.finish().map_err(unreadable)?,
            };
            for event in events {
                if on_event(event)? {
                    return Ok(Streamed::Complete);
                }
            }
            if chunk.is_none() {
                return Ok(Streamed::Ended);
            }
        }
    }

    /// The timeout of a wait of a streamed call: `what` came within the call's timeout.
    fn silent(&self, what: &str) -> ProviderError {
        self.error(ProviderErrorKind::Timeout, format!("{what} within {:?}", self.timeout))
    }

    /// Classifies a failure to read the rest of a stream that had begun.
    fn stream_error(&self, error: &reqwest::Error) -> ProviderError {
        if error.is_timeout() {
            self.error(
                ProviderErrorKind::Timeout,
                format!(
                    "the answer stopped arriving mid-stream and was not complete within {:?}: {}",
                    self.timeout,
                    error_chain(error)
                ),
            )
        } else {
            self.error(
                ProviderErrorKind::Connection,
                format!("the stream broke off: {}", error_chain(error)),
            )
        }
    }

    /// A [`ProviderErrorKind::BadResponse`] for a stream event that is not the wire format:
    /// what is wrong and the event's data (cut, the key redacted).
    pub(crate) fn bad_event(&self, problem: impl std::fmt::Display, data: &str) -> ProviderError {
        self.error(
            ProviderErrorKind::BadResponse,
            format!(
                "a stream event that is not the expected wire format ({problem}): {}",
                truncate(&self.redact(snippet(data.as_bytes())))
            ),
        )
    }
}
