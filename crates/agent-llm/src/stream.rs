//! Streamed answers: the pieces of a model's answer as they arrive ([`Piece`]), and where a
//! provider delivers them ([`TokenSink`], given to
//! [`Provider::complete_streaming`](crate::Provider::complete_streaming)).
//!
//! A stream shows an answer as it is written; it is never the answer. The answer is the
//! [`ChatResponse`](crate::ChatResponse) the call returns once the stream ended as the wire
//! format says it ends, and only that is checked, recorded in a conversation and counted by the
//! usage ledger. A call that fails mid-stream returns its error: the pieces delivered before
//! are not an answer, and nothing of them is recorded.

/// A piece of an answer as it arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// More of the answer's text (for a [`ResponseFormat::Json`](crate::ResponseFormat::Json)
    /// request: of the JSON text).
    Text(&'a str),
    /// More of the arguments of a tool call.
    ToolArguments {
        /// Which call of the answer, 0 for the first.
        index: usize,
        /// The tool called (empty while the server has not said).
        tool: &'a str,
        /// The arguments' next characters.
        text: &'a str,
    },
}

/// Where a streamed call delivers the pieces of its answer, in order, as they arrive. Any
/// `FnMut(Piece<'_>) + Send` closure is one.
///
/// The sink is called on the task that makes the call, between reads of the network: it should
/// return quickly (publish, buffer) and never wait.
pub trait TokenSink: Send {
    /// The next piece.
    fn piece(&mut self, piece: Piece<'_>);
}

impl<F: FnMut(Piece<'_>) + Send> TokenSink for F {
    fn piece(&mut self, piece: Piece<'_>) {
        self(piece);
    }
}

/// Delivers a whole answer to `sink`: its text as one piece, then each tool call's arguments.
pub(crate) fn deliver_whole(response: &crate::ChatResponse, sink: &mut dyn TokenSink) {
    if !response.text.is_empty() {
        sink.piece(Piece::Text(&response.text));
    }
    for (index, call) in response.tool_calls.iter().enumerate() {
        sink.piece(Piece::ToolArguments { index, tool: &call.name, text: &call.arguments });
    }
}

/// A sink lent in turn to the attempts of a call that may send its request more than once (a
/// provider trying the next structured output mode): each attempt holds a `&SharedSink`, which
/// is a [`TokenSink`] too.
#[cfg(feature = "http")]
pub(crate) struct SharedSink<'a>(std::sync::Mutex<&'a mut dyn TokenSink>);

#[cfg(feature = "http")]
impl<'a> SharedSink<'a> {
    /// Shares `sink`.
    pub(crate) fn new(sink: &'a mut dyn TokenSink) -> Self {
        Self(std::sync::Mutex::new(sink))
    }
}

#[cfg(feature = "http")]
impl TokenSink for &SharedSink<'_> {
    fn piece(&mut self, piece: Piece<'_>) {
        // Only the attempt under way delivers; a panic in a sink leaves nothing to protect.
        let mut sink = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        sink.piece(piece);
    }
}
