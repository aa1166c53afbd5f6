//! `complete_with_retry` on paused time: rate limits are waited out without counting as
//! failures, transient failures are retried with backoff, permanent ones end the call at once.
//!
//! The HTTP cases run the server and the provider's calls on a separate runtime on the real
//! clock ([`OffClock`]): tokio's paused clock jumps to the next timer whenever its runtime
//! parks, even while a socket is about to answer, which would fire the client's timeout. The
//! retry helper's sleeps stay on the test's paused clock, so the waits take no real time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use agent_llm::{
    AnthropicConfig, AnthropicProvider, ChatRequest, ChatResponse, MAX_RATE_LIMIT_WAITS, MAX_WAIT,
    OpenAiConfig, OpenAiProvider, Provider, ProviderError, ProviderErrorKind, RetryEvent,
    RetryStats, complete_with_retry,
};
use agent_state::RetryPolicy;
use async_trait::async_trait;
use serde_json::json;
use tokio::time::Instant;

use crate::http_server::{Reply, TestServer};

const KEY: &str = "sk-test-retry-secret";

fn openai(url: &str) -> OffClock<OpenAiProvider> {
    OffClock(Arc::new(
        OpenAiProvider::new(OpenAiConfig {
            api_key: Some(KEY.to_owned()),
            ..OpenAiConfig::new(format!("{url}/v1"), "gpt-test")
        })
        .unwrap(),
    ))
}

/// A runtime on the real clock for sockets, shared by the tests.
fn real_clock() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap()
    })
}

/// A [`TestServer`] running on [`real_clock`].
async fn start_server(replies: impl IntoIterator<Item = Reply>) -> TestServer {
    let replies: Vec<Reply> = replies.into_iter().collect();
    real_clock().spawn(TestServer::start(replies)).await.unwrap()
}

/// A provider whose calls run on [`real_clock`].
struct OffClock<P>(Arc<P>);

#[async_trait]
impl<P: Provider> Provider for OffClock<P> {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn model(&self) -> &str {
        self.0.model()
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let (provider, request) = (Arc::clone(&self.0), request.clone());
        real_clock().spawn(async move { provider.complete(&request).await }).await.unwrap()
    }
}

fn ok_reply(text: &str) -> Reply {
    Reply::json(200, json!({"choices": [{"message": {"role": "assistant", "content": text}}]}))
}

/// Failed attempts as the observer saw them: (attempt, kind, wait).
type Seen = Vec<(u32, ProviderErrorKind, Option<Duration>)>;

async fn run(
    provider: &dyn Provider,
    policy: &RetryPolicy,
) -> (Result<(ChatResponse, RetryStats), ProviderError>, Seen) {
    let mut seen = Vec::new();
    let mut observe = |event: &RetryEvent<'_>| {
        seen.push((event.attempt, event.error.kind, event.wait));
    };
    let result = complete_with_retry(provider, &ChatRequest::default(), policy, &mut observe).await;
    (result, seen)
}

#[tokio::test(start_paused = true)]
async fn rate_limit_waits_retry_after_and_is_not_a_failure() {
    let server = start_server([
        Reply::json(429, json!({"error": {"message": "slow down"}})).header("retry-after", "2"),
        ok_reply("done"),
    ])
    .await;
    let provider = openai(&server.url());
    let policy = RetryPolicy { max_retries: 0, ..RetryPolicy::executor_default() };
    let started = Instant::now();

    let (result, seen) = run(&provider, &policy).await;

    let (response, stats) = result.unwrap();
    assert_eq!(response.text, "done");
    assert_eq!(
        stats,
        RetryStats {
            attempts: 2,
            failures: 0,
            rate_limit_waits: 1,
            waited: Duration::from_secs(2),
        }
    );
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert_eq!(seen, vec![(1, ProviderErrorKind::RateLimited, Some(Duration::from_secs(2)))]);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn anthropic_rate_limit_honours_retry_after_ms() {
    let server = start_server([
        Reply::json(429, json!({"type": "error", "error": {"type": "rate_limit_error"}}))
            .header("retry-after", "30")
            .header("retry-after-ms", "250"),
        Reply::json(200, json!({"content": [{"type": "text", "text": "hi"}]})),
    ])
    .await;
    let provider = OffClock(Arc::new(
        AnthropicProvider::new(AnthropicConfig {
            base_url: server.url(),
            ..AnthropicConfig::new("claude-test")
        })
        .unwrap(),
    ));

    let (result, _) = run(&provider, &RetryPolicy::executor_default()).await;

    let (response, stats) = result.unwrap();
    assert_eq!(response.text, "hi");
    assert_eq!((stats.failures, stats.rate_limit_waits), (0, 1));
    assert_eq!(stats.waited, Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn server_error_is_retried_after_backoff_and_counted() {
    let server = start_server([
        Reply::json(500, json!({"error": {"message": "boom"}})),
        ok_reply("recovered"),
    ])
    .await;
    let provider = openai(&server.url());
    let policy = RetryPolicy::executor_default();

    let (result, seen) = run(&provider, &policy).await;

    let (response, stats) = result.unwrap();
    assert_eq!(response.text, "recovered");
    assert_eq!(
        stats,
        RetryStats { attempts: 2, failures: 1, rate_limit_waits: 0, waited: policy.backoff(1) }
    );
    assert_eq!(seen, vec![(1, ProviderErrorKind::Server, Some(policy.backoff(1)))]);
}

#[tokio::test(start_paused = true)]
async fn transient_failures_stop_after_max_retries() {
    let server = start_server([
        Reply::json(500, json!({"error": {"message": "boom 1"}})),
        Reply::json(503, json!({"error": {"message": "boom 2"}})),
        ok_reply("too late"),
    ])
    .await;
    let provider = openai(&server.url());
    let policy = RetryPolicy::executor_default();
    assert_eq!(policy.max_retries, 1);

    let (result, seen) = run(&provider, &policy).await;

    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Server);
    assert!(error.message.contains("boom 2"));
    assert_eq!(
        seen,
        vec![
            (1, ProviderErrorKind::Server, Some(policy.backoff(1))),
            (2, ProviderErrorKind::Server, None),
        ]
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn unauthorized_is_permanent_single_attempt() {
    let server = start_server([
        Reply::json(401, json!({"error": {"message": format!("bad key {KEY}")}})),
        ok_reply("never"),
    ])
    .await;
    let provider = openai(&server.url());

    let (result, seen) = run(&provider, &RetryPolicy::agent_default()).await;

    let error = result.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Unauthorized);
    let text = error.to_string();
    assert!(text.contains("openai") && text.contains("gpt-test") && text.contains("401"), "{text}");
    assert!(!text.contains(KEY), "{text}");
    assert_eq!(seen, vec![(1, ProviderErrorKind::Unauthorized, None)]);
    assert_eq!(server.requests().len(), 1);
}

/// A provider answering from a list, without HTTP.
struct Scripted {
    answers: Mutex<VecDeque<Result<ChatResponse, ProviderError>>>,
}

impl Scripted {
    fn new(answers: impl IntoIterator<Item = Result<ChatResponse, ProviderError>>) -> Self {
        Self { answers: Mutex::new(answers.into_iter().collect()) }
    }

    fn error(&self, kind: ProviderErrorKind, retry_after: Option<Duration>) -> ProviderError {
        ProviderError { retry_after, ..ProviderError::new(self, kind, "scripted") }
    }
}

#[async_trait]
impl Provider for Scripted {
    fn name(&self) -> &str {
        "scripted"
    }

    fn model(&self) -> &str {
        "m"
    }

    async fn complete(&self, _request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        self.answers.lock().unwrap().pop_front().unwrap_or_else(|| Ok(ChatResponse::default()))
    }
}

#[tokio::test(start_paused = true)]
async fn endless_rate_limits_give_up_after_the_cap() {
    let probe = Scripted::new([]);
    let limited = probe.error(ProviderErrorKind::RateLimited, Some(Duration::from_secs(1)));
    let provider =
        Scripted::new(std::iter::repeat_n(Err(limited), MAX_RATE_LIMIT_WAITS as usize + 5));

    let (result, seen) = run(&provider, &RetryPolicy::agent_default()).await;

    assert_eq!(result.unwrap_err().kind, ProviderErrorKind::RateLimited);
    assert_eq!(seen.len(), MAX_RATE_LIMIT_WAITS as usize + 1);
    assert_eq!(
        seen.last(),
        Some(&(MAX_RATE_LIMIT_WAITS + 1, ProviderErrorKind::RateLimited, None))
    );
}

#[tokio::test(start_paused = true)]
async fn waits_use_backoff_without_retry_after_and_are_capped() {
    let probe = Scripted::new([]);
    let provider = Scripted::new([
        Err(probe.error(ProviderErrorKind::RateLimited, None)),
        Err(probe.error(ProviderErrorKind::RateLimited, Some(Duration::from_secs(3_600)))),
        Err(probe.error(ProviderErrorKind::Timeout, None)),
        Err(probe.error(ProviderErrorKind::Connection, None)),
    ]);
    let policy = RetryPolicy::agent_default();

    let (result, seen) = run(&provider, &policy).await;

    let (_, stats) = result.unwrap();
    assert_eq!(
        seen,
        vec![
            (1, ProviderErrorKind::RateLimited, Some(policy.backoff(1))),
            (2, ProviderErrorKind::RateLimited, Some(MAX_WAIT)),
            (3, ProviderErrorKind::Timeout, Some(policy.backoff(1))),
            (4, ProviderErrorKind::Connection, Some(policy.backoff(2))),
        ]
    );
    assert_eq!(
        stats,
        RetryStats {
            attempts: 5,
            failures: 2,
            rate_limit_waits: 2,
            waited: policy.backoff(1) * 2 + MAX_WAIT + policy.backoff(2),
        }
    );
}

#[tokio::test(start_paused = true)]
async fn permanent_errors_are_not_retried() {
    let probe = Scripted::new([]);
    for kind in [
        ProviderErrorKind::BadRequest,
        ProviderErrorKind::BadResponse,
        ProviderErrorKind::UnknownModel,
        ProviderErrorKind::Forbidden,
    ] {
        let provider = Scripted::new([Err(probe.error(kind, None))]);
        let (result, seen) = run(&provider, &RetryPolicy::agent_default()).await;
        assert_eq!(result.unwrap_err().kind, kind);
        assert_eq!(seen, vec![(1, kind, None)]);
    }
}
