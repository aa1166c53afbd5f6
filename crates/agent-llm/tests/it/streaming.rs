//! Streamed answers: both HTTP providers' stream formats read into the same answer as a whole
//! one (text, tool calls, usage), the pieces delivered in order; a server that hangs
//! mid-stream, sends malformed JSON, cuts the stream short or sends no usage; and the reasoner
//! publishing the pieces on the team's event hub while the usage ledger counts exactly what it
//! counts for a call that is not streamed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_core::{EventHub, ModelTokens, Reasoner, Received, TeamEvent};
use agent_llm::testing::{FakeModel, StreamStyle, text_completion, tool_call_completion};
use agent_llm::{
    AnthropicConfig, AnthropicProvider, Budget, ChatMessage, ChatRequest, ChatResponse,
    ConversationLimits, Conversations, LlmReasoner, LlmSettings, OpenAiConfig, OpenAiProvider,
    Piece, Price, PriceTable, Provider, ProviderError, ProviderErrorKind, ResponseFormat,
    TokenSink, ToolSpec, UsageLedger,
};
use agent_state::{AgentLayer, RetryPolicy};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::http_server::{Reply, TestServer};
use crate::reasoner::{Agent, conflict};

/// The pieces a call delivered, in order.
#[derive(Debug, Default)]
struct Pieces(Vec<(Option<(usize, String)>, String)>);

impl TokenSink for Pieces {
    fn piece(&mut self, piece: Piece<'_>) {
        self.0.push(match piece {
            Piece::Text(text) => (None, text.to_owned()),
            Piece::ToolArguments { index, tool, text } => {
                (Some((index, tool.to_owned())), text.to_owned())
            }
        });
    }
}

impl Pieces {
    /// The text pieces joined.
    fn text(&self) -> String {
        self.0.iter().filter(|(tool, _)| tool.is_none()).map(|(_, t)| t.as_str()).collect()
    }

    /// The argument pieces of call `index` joined.
    fn arguments(&self, index: usize) -> String {
        let of_call = |(tool, _): &&(Option<(usize, String)>, String)| {
            tool.as_ref().is_some_and(|(i, _)| *i == index)
        };
        self.0.iter().filter(of_call).map(|(_, t)| t.as_str()).collect()
    }
}

fn openai(model: &FakeModel, timeout: Duration) -> OpenAiProvider {
    let mut config = OpenAiConfig::new(model.url(), model.model());
    config.timeout = timeout;
    OpenAiProvider::new(config).unwrap()
}

fn verdict_request() -> ChatRequest {
    ChatRequest {
        system: "You judge.".to_owned(),
        messages: vec![ChatMessage::user("Sign?")],
        response: ResponseFormat::Json {
            name: "verdict".to_owned(),
            schema: json!({"type": "object", "properties": {"verdict": {"type": "string"}}}),
        },
        max_tokens: 100,
        ..ChatRequest::default()
    }
}

fn verdict() -> Value {
    json!({"verdict": "sign", "reason": "the plan writes one file, as asked — fine ✓"})
}

#[tokio::test]
async fn an_openai_stream_reads_as_the_whole_answer_with_its_usage_and_pieces_in_order() {
    let model = FakeModel::start("gpt-stream", |_| Ok(text_completion("gpt-stream", &verdict())))
        .await
        .unwrap();
    let provider = openai(&model, Duration::from_secs(10));
    let whole = provider.complete(&verdict_request()).await.unwrap();
    let mut pieces = Pieces::default();
    let streamed = provider.complete_streaming(&verdict_request(), &mut pieces).await.unwrap();
    assert_eq!(streamed, whole, "the same answer and usage, streamed or not");
    assert_eq!(streamed.text, verdict().to_string());
    assert!(pieces.0.len() > 10, "delivered in pieces: {pieces:?}");
    assert_eq!(pieces.text(), streamed.text);
    let asked = model.requests();
    assert_eq!(asked[0].get("stream"), None);
    assert_eq!(asked[1]["stream"], json!(true));
    assert_eq!(asked[1]["stream_options"], json!({"include_usage": true}));
    assert!(model.problems().is_empty(), "{:?}", model.problems());
}

#[tokio::test]
async fn an_openai_streamed_tool_call_is_put_together_from_its_fragments() {
    let arguments = json!({"path": "src/main.rs", "note": "ünïcode"});
    let model = FakeModel::start("gpt-stream", move |_| {
        Ok(tool_call_completion("gpt-stream", "call_7", "read_file", &arguments))
    })
    .await
    .unwrap();
    let provider = openai(&model, Duration::from_secs(10));
    let request = ChatRequest {
        messages: vec![ChatMessage::user("Read it.")],
        tools: vec![ToolSpec {
            name: "read_file".to_owned(),
            description: "Read a file".to_owned(),
            parameters: json!({"type": "object"}),
        }],
        require_tool: true,
        ..ChatRequest::default()
    };
    let whole = provider.complete(&request).await.unwrap();
    let mut pieces = Pieces::default();
    let streamed = provider.complete_streaming(&request, &mut pieces).await.unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(streamed.tool_calls.len(), 1);
    assert_eq!(streamed.tool_calls[0].id, "call_7");
    assert_eq!(pieces.arguments(0), streamed.tool_calls[0].arguments);
    assert!(pieces.0.iter().all(|(tool, _)| tool == &Some((0, "read_file".to_owned()))));
}

#[tokio::test]
async fn an_openai_server_that_hangs_mid_stream_is_a_timeout_naming_provider_and_model() {
    let model = FakeModel::start("gpt-stall", |_| Ok(text_completion("gpt-stall", &verdict())))
        .await
        .unwrap();
    model.set_stream_style(StreamStyle::Stall);
    let provider = openai(&model, Duration::from_millis(400));
    let mut pieces = Pieces::default();
    let error = provider.complete_streaming(&verdict_request(), &mut pieces).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
    assert!(error.is_transient());
    let shown = error.to_string();
    assert!(shown.starts_with("openai model `gpt-stall`: timed out"), "{shown}");
    assert!(shown.contains("mid-stream"), "{shown}");
    assert!(!pieces.0.is_empty(), "the first half arrived before the stall");
}

#[tokio::test]
async fn malformed_json_mid_stream_is_a_bad_response_naming_the_provider() {
    let model =
        FakeModel::start("gpt-bad", |_| Ok(text_completion("gpt-bad", &verdict()))).await.unwrap();
    model.set_stream_style(StreamStyle::Malformed);
    let provider = openai(&model, Duration::from_secs(10));
    let error =
        provider.complete_streaming(&verdict_request(), &mut Pieces::default()).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::BadResponse, "{error}");
    assert!(!error.is_transient());
    let shown = error.to_string();
    assert!(shown.starts_with("openai model `gpt-bad`: unreadable response"), "{shown}");
    assert!(shown.contains("stream event"), "{shown}");
}

#[tokio::test]
async fn a_stream_without_usage_counts_none_and_the_provider_stops_streaming() {
    let model = FakeModel::start("gpt-nousage", |_| Ok(text_completion("gpt-nousage", &verdict())))
        .await
        .unwrap();
    model.set_stream_style(StreamStyle::NoUsage);
    let provider = openai(&model, Duration::from_secs(10));
    let mut pieces = Pieces::default();
    let first = provider.complete_streaming(&verdict_request(), &mut pieces).await.unwrap();
    assert_eq!(first.text, verdict().to_string());
    assert_eq!(first.usage, agent_llm::Usage::default(), "the server did not say: nothing made up");
    let mut pieces = Pieces::default();
    let second = provider.complete_streaming(&verdict_request(), &mut pieces).await.unwrap();
    assert_eq!(second.usage.input_tokens, agent_llm::testing::USAGE_PROMPT_TOKENS);
    assert_eq!(pieces.text(), second.text, "the whole answer, delivered as one piece");
    assert_eq!(pieces.0.len(), 1);
    let asked = model.requests();
    assert_eq!(asked[1].get("stream"), None, "later calls are not streamed");
}

#[tokio::test]
async fn a_server_that_ignores_stream_true_answers_whole() {
    let model = FakeModel::start("gpt-whole", |_| Ok(text_completion("gpt-whole", &verdict())))
        .await
        .unwrap();
    model.set_stream_style(StreamStyle::Whole);
    let provider = openai(&model, Duration::from_secs(10));
    let mut pieces = Pieces::default();
    let answer = provider.complete_streaming(&verdict_request(), &mut pieces).await.unwrap();
    assert_eq!(answer.text, verdict().to_string());
    assert_eq!(answer.usage.output_tokens, agent_llm::testing::USAGE_COMPLETION_TOKENS);
    assert_eq!(pieces.text(), answer.text);
}

#[tokio::test]
async fn an_openai_stream_cut_short_is_a_transient_connection_error() {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": "{\"ver"}}]});
    let body = format!("data: {chunk}\n\n");
    let server = TestServer::start([Reply::raw(200, "text/event-stream", body)]).await;
    let provider =
        OpenAiProvider::new(OpenAiConfig::new(format!("{}/v1", server.url()), "gpt-x")).unwrap();
    let request = ChatRequest { messages: vec![ChatMessage::user("hi")], ..Default::default() };
    let error = provider.complete_streaming(&request, &mut Pieces::default()).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Connection, "{error}");
    assert!(error.to_string().contains("ended before the answer was complete"), "{error}");
}

#[tokio::test]
async fn an_error_chunk_mid_stream_is_the_servers_error() {
    let chunk = json!({"choices": [{"index": 0, "delta": {"content": "{\"ver"}}]});
    let error = json!({"error": {"message": "the model is overloaded", "type": "server_error"}});
    let body = format!("data: {chunk}\n\ndata: {error}\n\n");
    let server = TestServer::start([Reply::raw(200, "text/event-stream", body)]).await;
    let provider =
        OpenAiProvider::new(OpenAiConfig::new(format!("{}/v1", server.url()), "gpt-x")).unwrap();
    let request = ChatRequest { messages: vec![ChatMessage::user("hi")], ..Default::default() };
    let error = provider.complete_streaming(&request, &mut Pieces::default()).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Server, "{error}");
    assert!(error.to_string().contains("the model is overloaded"), "{error}");
}

// ---------------------------------------------------------------------------------------------
// Anthropic.

fn anthropic(url: &str, timeout: Duration) -> AnthropicProvider {
    let mut config = AnthropicConfig::new("claude-test");
    config.base_url = url.to_owned();
    config.timeout = timeout;
    AnthropicProvider::new(config).unwrap()
}

/// An event stream of `events` (name, data) as the Messages API sends it.
fn sse(events: &[(&str, Value)]) -> String {
    events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
}

/// A streamed message: a text block, the forced `verdict` tool's input in pieces, a
/// `read_file` call in pieces; 25 tokens in, 19 out.
fn anthropic_stream() -> String {
    sse(&[
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "content": [], "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Let me "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "answer."}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "verdict", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "{\"verdict\": "}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": "\"sign\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 1})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": "{\"path\":"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": " \"a.md\"}"}}),
        ),
        ("content_block_stop", json!({"type": "content_block_stop", "index": 2})),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 19}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ])
}

/// The same message, whole.
fn anthropic_whole() -> Value {
    json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
        "content": [
            {"type": "text", "text": "Let me answer."},
            {"type": "tool_use", "id": "toolu_1", "name": "verdict", "input": {"verdict": "sign"}},
            {"type": "tool_use", "id": "toolu_2", "name": "read_file", "input": {"path": "a.md"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 25, "output_tokens": 19},
    })
}

#[tokio::test]
async fn an_anthropic_stream_reads_as_the_whole_message_with_its_usage() {
    let server = TestServer::start([
        Reply::json(200, anthropic_whole()),
        Reply::raw(200, "text/event-stream", anthropic_stream()),
    ])
    .await;
    let provider = anthropic(&server.url(), Duration::from_secs(10));
    let whole = provider.complete(&verdict_request()).await.unwrap();
    let mut pieces = Pieces::default();
    let streamed = provider.complete_streaming(&verdict_request(), &mut pieces).await.unwrap();
    assert_eq!(streamed, whole, "the same answer and usage, streamed or not");
    assert_eq!(streamed.text, r#"{"verdict":"sign"}"#);
    assert_eq!(streamed.usage.input_tokens, 25);
    assert_eq!(streamed.usage.output_tokens, 19);
    // The text block and the forced tool's input are the answer's text, as they came.
    assert_eq!(pieces.text(), "Let me answer.{\"verdict\": \"sign\"}");
    assert_eq!(pieces.arguments(0), "{\"path\": \"a.md\"}");
    let asked = server.requests();
    assert_eq!(asked[0].json().get("stream"), None);
    assert_eq!(asked[1].json()["stream"], json!(true));
}

#[tokio::test]
async fn an_anthropic_server_that_hangs_mid_stream_is_a_timeout() {
    let stream = anthropic_stream();
    let half = stream.len() / 2;
    let server =
        TestServer::start([Reply::raw(200, "text/event-stream", stream).stalling_after(half)])
            .await;
    let provider = anthropic(&server.url(), Duration::from_millis(400));
    let error =
        provider.complete_streaming(&verdict_request(), &mut Pieces::default()).await.unwrap_err();
    assert_eq!(error.kind, ProviderErrorKind::Timeout, "{error}");
    assert!(error.to_string().starts_with("anthropic model `claude-test`: timed out"), "{error}");
}

#[tokio::test]
async fn anthropic_malformed_events_and_error_events_are_typed() {
    let start = (
        "message_start",
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
    );
    let malformed = format!(
        "{}event: content_block_delta\ndata: {{\"type\": \"content_bl\n\n",
        sse(std::slice::from_ref(&start))
    );
    let overloaded = sse(&[
        start.clone(),
        (
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
    ]);
    let cut = sse(&[start]);
    let server = TestServer::start([
        Reply::raw(200, "text/event-stream", malformed),
        Reply::raw(200, "text/event-stream", overloaded),
        Reply::raw(200, "text/event-stream", cut),
    ])
    .await;
    let provider = anthropic(&server.url(), Duration::from_secs(10));
    let mut errors = Vec::new();
    for _ in 0..3 {
        let error = provider
            .complete_streaming(&verdict_request(), &mut Pieces::default())
            .await
            .unwrap_err();
        assert!(error.to_string().starts_with("anthropic model `claude-test`"), "{error}");
        errors.push(error.kind);
    }
    assert_eq!(
        errors,
        [ProviderErrorKind::BadResponse, ProviderErrorKind::Server, ProviderErrorKind::Connection]
    );
}

// ---------------------------------------------------------------------------------------------
// The reasoner.

/// A reasoner for `provider` publishing on `hub` (when given), with its ledger (gpt-stream
/// priced) and conversations.
fn reasoner(
    provider: Arc<dyn Provider>,
    hub: Option<&EventHub>,
) -> (LlmReasoner, Arc<UsageLedger>, Arc<Conversations>) {
    let mut prices = PriceTable::new();
    let price = Price { input_per_mtok: 3.0, output_per_mtok: 15.0 };
    prices.set(provider.model(), price).unwrap();
    let ledger = Arc::new(UsageLedger::new(prices, Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let settings = LlmSettings {
        retry: Some(RetryPolicy { max_retries: 0, ..RetryPolicy::default() }),
        ..LlmSettings::default()
    };
    let mut reasoner =
        LlmReasoner::new(provider, ledger.clone(), conversations.clone()).with_settings(settings);
    if let Some(hub) = hub {
        reasoner = reasoner.with_events(hub.clone());
    }
    (reasoner, ledger, conversations)
}

/// The token events waiting on `stream`.
fn tokens(stream: &mut agent_core::EventStream) -> Vec<ModelTokens> {
    let mut found = Vec::new();
    while let Some(received) = stream.try_next() {
        if let Received::Event(event) = received
            && let TeamEvent::Tokens(tokens) = &*event
        {
            found.push(tokens.clone());
        }
    }
    found
}

fn vote() -> Value {
    json!({"choice": "b", "reason": "cheaper, and the lead of domain b asked first"})
}

#[tokio::test]
async fn a_streamed_vote_is_published_in_order_and_counted_exactly_as_one_not_streamed() {
    let model = FakeModel::start("gpt-stream", |_| Ok(text_completion("gpt-stream", &vote())))
        .await
        .unwrap();
    let agent = Agent::new("top-a", AgentLayer::Top);
    let hub = EventHub::default();
    let mut watching = hub.subscribe();
    let (streaming, streamed_ledger, streamed_talk) =
        reasoner(Arc::new(openai(&model, Duration::from_secs(10))), Some(&hub));
    let (plain, plain_ledger, _) =
        reasoner(Arc::new(openai(&model, Duration::from_secs(10))), None);
    let plain = plain.with_settings(LlmSettings {
        stream: false,
        retry: Some(RetryPolicy { max_retries: 0, ..RetryPolicy::default() }),
        ..LlmSettings::default()
    });

    let conflict = conflict(&["a", "b"]);
    assert_eq!(streaming.vote(agent.persona(), &conflict).await.unwrap(), "b");
    assert_eq!(plain.vote(agent.persona(), &conflict).await.unwrap(), "b");

    let asked = model.requests();
    assert_eq!(asked[0]["stream"], json!(true));
    assert_eq!(asked[1].get("stream"), None);
    let events = tokens(&mut watching);
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e.agent.as_str() == "top-a"
        && e.call == 1
        && e.attempt == 1
        && e.tool.is_none()
        && e.text.chars().count() <= agent_core::MAX_TOKEN_EVENT_CHARS));
    let published: String = events.iter().map(|e| e.text.as_str()).collect();
    assert_eq!(published, vote().to_string(), "the pieces, in order, are the answer");

    let (streamed, plain) = (streamed_ledger.report(), plain_ledger.report());
    assert_eq!(streamed.total, plain.total, "the same tokens and cost, streamed or not");
    assert_eq!(streamed.total.input_tokens, agent_llm::testing::USAGE_PROMPT_TOKENS);
    assert!(streamed.total.cost_usd > 0.0);
    assert_eq!(streamed.by_agent, plain.by_agent);
    assert_eq!(streamed_talk.get(&agent.config.id).unwrap().turns.len(), 1);
}

/// Issue #32: unwatched, an answer still streams, as progress of the agent's turn only
/// (nothing is published); with streaming off nothing streams, and the call shows no progress
/// until its answer.
#[tokio::test]
async fn unwatched_an_answer_streams_as_progress_only_and_with_streaming_off_nothing_streams() {
    let model = FakeModel::start("gpt-stream", |_| Ok(text_completion("gpt-stream", &vote())))
        .await
        .unwrap();
    let agent = Agent::new("top-a", AgentLayer::Top);
    let hub = EventHub::default();
    let progress = Arc::new(agent_core::Progress::default());
    progress.begin_turn();
    let conflict = conflict(&["a", "b"]);
    let (unwatched, _, _) = reasoner(Arc::new(openai(&model, Duration::from_secs(10))), Some(&hub));
    let vote = unwatched.vote(agent.persona(), &conflict);
    agent_core::progress::scope(progress.clone(), vote).await.unwrap();
    let streamed = progress.tokens();
    assert!(streamed > 1, "each piece was progress: {streamed}");

    let mut watching = hub.subscribe();
    let (off, _, _) = reasoner(Arc::new(openai(&model, Duration::from_secs(10))), Some(&hub));
    let off = off.with_settings(LlmSettings { stream: false, ..LlmSettings::default() });
    let vote = off.vote(agent.persona(), &conflict);
    agent_core::progress::scope(progress.clone(), vote).await.unwrap();
    assert_eq!(progress.tokens(), streamed, "not streamed: no progress");
    let asked = model.requests();
    assert_eq!(asked[0]["stream"], json!(true));
    assert_eq!(asked[1].get("stream"), None);
    assert!(tokens(&mut watching).is_empty(), "nothing published");
}

#[tokio::test]
async fn a_stream_that_hangs_fails_the_call_records_nothing_half_and_the_reasoner_goes_on() {
    let model =
        FakeModel::start("gpt-stall", |_| Ok(text_completion("gpt-stall", &vote()))).await.unwrap();
    model.set_stream_style(StreamStyle::Stall);
    let agent = Agent::new("top-a", AgentLayer::Top);
    let hub = EventHub::default();
    let mut watching = hub.subscribe();
    let (reasoner, ledger, talk) =
        reasoner(Arc::new(openai(&model, Duration::from_millis(400))), Some(&hub));
    let error = reasoner.vote(agent.persona(), &conflict(&["a", "b"])).await.unwrap_err();
    let shown = error.to_string();
    assert!(shown.contains("openai model `gpt-stall`: timed out"), "{shown}");
    assert!(!tokens(&mut watching).is_empty(), "the first half was published");
    let report = ledger.report();
    assert_eq!((report.total.calls, report.total.failed_calls), (0, 1));
    assert_eq!(report.total.tokens(), 0, "a failed call's partial answer counts nothing");
    assert!(talk.get(&agent.config.id).unwrap().turns.is_empty(), "nothing half-recorded");

    // The same reasoner answers the next call once the server streams again.
    model.set_stream_style(StreamStyle::Chunks);
    assert_eq!(reasoner.vote(agent.persona(), &conflict(&["a", "b"])).await.unwrap(), "b");
    let events = tokens(&mut watching);
    assert!(events.iter().all(|e| e.call == 2));
    assert_eq!(events.iter().map(|e| e.text.as_str()).collect::<String>(), vote().to_string());
}

/// A provider whose first streamed attempt delivers half an answer and fails (transient); the
/// second delivers the whole answer.
struct FailsOnce {
    attempts: Mutex<u32>,
}

#[async_trait]
impl Provider for FailsOnce {
    fn name(&self) -> &str {
        "flaky"
    }

    fn model(&self) -> &str {
        "flaky-1"
    }

    async fn complete(&self, _: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        unreachable!("the reasoner streams")
    }

    async fn complete_streaming(
        &self,
        _: &ChatRequest,
        sink: &mut dyn TokenSink,
    ) -> Result<ChatResponse, ProviderError> {
        let attempt = {
            let mut attempts = self.attempts.lock().unwrap();
            *attempts += 1;
            *attempts
        };
        let text = vote().to_string();
        if attempt == 1 {
            sink.piece(Piece::Text(&text[..10]));
            return Err(ProviderError::new(self, ProviderErrorKind::Connection, "broke off"));
        }
        sink.piece(Piece::Text(&text[..10]));
        sink.piece(Piece::Text(&text[10..]));
        let usage = agent_llm::Usage { input_tokens: 40, output_tokens: 12 };
        Ok(ChatResponse { text, usage, ..ChatResponse::default() })
    }
}

#[tokio::test(start_paused = true)]
async fn a_retried_attempt_starts_the_published_answer_over() {
    let provider = Arc::new(FailsOnce { attempts: Mutex::new(0) });
    let agent = Agent::new("top-a", AgentLayer::Top);
    let hub = EventHub::default();
    let mut watching = hub.subscribe();
    let (reasoner, ledger, _) = reasoner(provider, Some(&hub));
    let reasoner = reasoner.with_settings(LlmSettings {
        retry: Some(RetryPolicy { max_retries: 1, ..RetryPolicy::default() }),
        ..LlmSettings::default()
    });
    assert_eq!(reasoner.vote(agent.persona(), &conflict(&["a", "b"])).await.unwrap(), "b");
    let events = tokens(&mut watching);
    let of = |attempt: u32| -> String {
        events.iter().filter(|e| e.attempt == attempt).map(|e| e.text.as_str()).collect()
    };
    assert_eq!(of(1), vote().to_string()[..10]);
    assert_eq!(of(2), vote().to_string());
    let attempts: Vec<u32> = events.iter().map(|e| e.attempt).collect();
    assert!(attempts.is_sorted(), "{attempts:?}");
    let report = ledger.report();
    assert_eq!(report.total.input_tokens, 40, "only the answer's usage");
    assert_eq!(report.total.failed_calls, 1, "the failed attempt, booked as a failed call");
}
