//! The reasoner publishing a streamed answer on the team's event hub, attempt by attempt,
//! while the usage ledger counts only the answer's usage.

use std::sync::{Arc, Mutex};

use agent_core::{EventHub, ModelTokens, Reasoner, Received, TeamEvent};
use agent_llm::{
    Budget, ChatRequest, ChatResponse, ConversationLimits, Conversations, LlmReasoner, LlmSettings,
    Piece, Price, PriceTable, Provider, ProviderError, ProviderErrorKind, TokenSink, UsageLedger,
};
use agent_state::{AgentLayer, RetryPolicy};
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::reasoner::{Agent, conflict};

/// A reasoner for `provider` publishing on `hub` (when given), with its ledger (gpt-stream
/// priced) and conversations.
fn reasoner(
    provider: Arc<dyn Provider>,
    hub: Option<&EventHub>,
) -> (LlmReasoner, Arc<UsageLedger>, Arc<Conversations>) {
    let mut prices = PriceTable::new();
    let price = Price {
        input_per_mtok: 3.0,
        output_per_mtok: 15.0,
    };
    prices.set(provider.model(), price).unwrap();
    let ledger = Arc::new(UsageLedger::new(prices, Budget::default()));
    let conversations = Arc::new(Conversations::in_memory(ConversationLimits::default()));
    let settings = LlmSettings {
        retry: Some(RetryPolicy {
            max_retries: 0,
            ..RetryPolicy::default()
        }),
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
            return Err(ProviderError::new(
                self,
                ProviderErrorKind::Connection,
                "broke off",
            ));
        }
        sink.piece(Piece::Text(&text[..10]));
        sink.piece(Piece::Text(&text[10..]));
        let usage = agent_llm::Usage {
            input_tokens: 40,
            output_tokens: 12,
        };
        Ok(ChatResponse {
            text,
            usage,
            ..ChatResponse::default()
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_retried_attempt_starts_the_published_answer_over() {
    let provider = Arc::new(FailsOnce {
        attempts: Mutex::new(0),
    });
    let agent = Agent::new("top-a", AgentLayer::Top);
    let hub = EventHub::default();
    let mut watching = hub.subscribe();
    let (reasoner, ledger, _) = reasoner(provider, Some(&hub));
    let reasoner = reasoner.with_settings(LlmSettings {
        retry: Some(RetryPolicy {
            max_retries: 1,
            ..RetryPolicy::default()
        }),
        ..LlmSettings::default()
    });
    assert_eq!(
        reasoner
            .vote(agent.persona(), &conflict(&["a", "b"]))
            .await
            .unwrap(),
        "b"
    );
    let events = tokens(&mut watching);
    let of = |attempt: u32| -> String {
        events
            .iter()
            .filter(|e| e.attempt == attempt)
            .map(|e| e.text.as_str())
            .collect()
    };
    assert_eq!(of(1), vote().to_string()[..10]);
    assert_eq!(of(2), vote().to_string());
    let attempts: Vec<u32> = events.iter().map(|e| e.attempt).collect();
    assert!(attempts.is_sorted(), "{attempts:?}");
    let report = ledger.report();
    assert_eq!(report.total.input_tokens, 40, "only the answer's usage");
    assert_eq!(
        report.total.failed_calls, 1,
        "the failed attempt, booked as a failed call"
    );
}
