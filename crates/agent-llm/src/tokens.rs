//! A model call whose answer is published on the team's event hub as it streams
//! ([`agent_core::TeamEvent::Tokens`]): what [`crate::LlmReasoner`] does for every call when it
//! has a hub ([`crate::LlmReasoner::with_events`]), streaming is on
//! ([`crate::LlmSettings::stream`]) and someone watches.
//!
//! Pieces are coalesced so that a fast model does not flood the hub (whose subscribers would
//! then lose other events): the pieces of one kind (the text, or one tool call's arguments)
//! are published together once [`FLUSH_AFTER`] passed since the last event of the call, once
//! [`MAX_TOKEN_EVENT_CHARS`] characters are waiting, when the kind or the attempt changes, and
//! when the call ends. Publishing never waits ([`EventHub::publish`]).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agent_core::{EventHub, MAX_TOKEN_EVENT_CHARS, ModelTokens, TeamEvent};
use agent_state::{AgentId, RetryPolicy};
use tokio::time::Instant;

use crate::provider::{ChatRequest, ChatResponse, Provider, ProviderError};
use crate::retry::{RetryEvent, RetryStats, complete_streaming_with_retry};
use crate::stream::{Piece, TokenSink};

/// Longest a piece waits before it is published, unless more of it arrives.
pub(crate) const FLUSH_AFTER: Duration = Duration::from_millis(100);

/// Where a model call's answer is published while it arrives: on `hub`, as call `call` of
/// `agent`.
pub(crate) struct PublishTo<'a> {
    pub(crate) hub: &'a EventHub,
    pub(crate) agent: &'a AgentId,
    pub(crate) call: u64,
}

/// [`complete_streaming_with_retry`], the answer published where `to` says while it arrives.
pub(crate) async fn complete_publishing(
    provider: &dyn Provider,
    request: &ChatRequest,
    policy: &RetryPolicy,
    observer: &mut (dyn FnMut(&RetryEvent<'_>) + Send),
    to: PublishTo<'_>,
) -> Result<(ChatResponse, RetryStats), ProviderError> {
    let PublishTo { hub, agent, call } = to;
    let attempt = AtomicU32::new(1);
    let mut publisher =
        Publisher { hub, agent, call, attempt: &attempt, pending: None, last: Instant::now() };
    let mut observe = |event: &RetryEvent<'_>| {
        if event.wait.is_some() {
            attempt.fetch_add(1, Ordering::Relaxed);
        }
        observer(event);
    };
    let result =
        complete_streaming_with_retry(provider, request, policy, &mut observe, &mut publisher)
            .await;
    publisher.flush();
    result
}

/// Text waiting to be published: its attempt, its tool call (`None`: the answer's text).
struct Pending {
    attempt: u32,
    tool: Option<(usize, String)>,
    text: String,
}

/// The sink that publishes a call's pieces.
struct Publisher<'a> {
    hub: &'a EventHub,
    agent: &'a AgentId,
    call: u64,
    /// The attempt under way (the retry observer counts them).
    attempt: &'a AtomicU32,
    pending: Option<Pending>,
    /// When the call last published (or began).
    last: Instant,
}

impl Publisher<'_> {
    /// Publishes what is waiting, in events of at most [`MAX_TOKEN_EVENT_CHARS`] characters.
    fn flush(&mut self) {
        let Some(pending) = self.pending.take() else { return };
        self.last = Instant::now();
        let mut rest = pending.text.as_str();
        while !rest.is_empty() {
            let cut = rest.char_indices().nth(MAX_TOKEN_EVENT_CHARS).map_or(rest.len(), |(i, _)| i);
            let (text, after) = rest.split_at(cut);
            rest = after;
            self.hub.publish(TeamEvent::Tokens(ModelTokens {
                agent: self.agent.clone(),
                call: self.call,
                attempt: pending.attempt,
                tool: pending.tool.as_ref().map(|(_, tool)| tool.clone()),
                text: text.to_owned(),
            }));
        }
    }
}

impl TokenSink for Publisher<'_> {
    fn piece(&mut self, piece: Piece<'_>) {
        agent_core::progress::pieces(1);
        let attempt = self.attempt.load(Ordering::Relaxed);
        let (tool, text) = match piece {
            Piece::Text(text) => (None, text),
            Piece::ToolArguments { index, tool, text } => (Some((index, tool)), text),
        };
        let same = self.pending.as_ref().is_some_and(|p| {
            p.attempt == attempt && p.tool.as_ref().map(|(i, t)| (*i, t.as_str())) == tool
        });
        if !same {
            self.flush();
            self.pending = Some(Pending {
                attempt,
                tool: tool.map(|(i, t)| (i, t.to_owned())),
                text: String::new(),
            });
        }
        if let Some(pending) = self.pending.as_mut() {
            pending.text.push_str(text);
            if pending.text.chars().count() >= MAX_TOKEN_EVENT_CHARS
                || self.last.elapsed() >= FLUSH_AFTER
            {
                self.flush();
            }
        }
    }
}
