//! Per-agent conversations: each agent's own history of questions and answers, isolated from
//! every other agent's, bounded, and kept with the run.
//!
//! # The bounding rule
//!
//! A conversation keeps whole turns (one question and its answer). After a turn is added, the
//! oldest turns are dropped while there are more than [`ConversationLimits::max_turns`] of
//! them or their text is longer than [`ConversationLimits::max_chars`] characters, but the
//! newest turn is always kept. The count of dropped turns is kept and told to the model in the
//! system prompt ("N earlier turns were dropped"), so it knows its memory is partial. Dropping,
//! not summarising, is deliberate: a summary would cost a model call per drop and could be
//! wrong; the run's audit log and whiteboards keep the full record.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_state::{AgentId, BackendError, Versioned};
use serde::{Deserialize, Serialize};

use crate::provider::ChatMessage;
use crate::store::LlmStore;

/// How much of its history an agent keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConversationLimits {
    /// Most turns kept (default 8).
    pub max_turns: usize,
    /// Most characters of question and answer text kept (default 12 000, about 3 000 tokens).
    pub max_chars: usize,
}

impl Default for ConversationLimits {
    fn default() -> Self {
        Self { max_turns: 8, max_chars: 12_000 }
    }
}

/// One question put to the model and the answer it gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// Which decision: `review`, `vote`, `decompose`, `next_action`, `judge`.
    pub decision: String,
    /// The question.
    pub prompt: String,
    /// The accepted answer.
    pub answer: String,
}

impl Turn {
    fn chars(&self) -> usize {
        self.prompt.chars().count() + self.answer.chars().count()
    }
}

/// One agent's history.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Conversation {
    /// The kept turns, oldest first.
    pub turns: VecDeque<Turn>,
    /// How many older turns were dropped by the bounding rule.
    pub dropped: u64,
}

impl Versioned for Conversation {
    const KIND: &'static str = "llm_conversation";
    const VERSION: u32 = 1;
}

impl Conversation {
    /// Adds `turn` and applies the bounding rule.
    pub fn push(&mut self, turn: Turn, limits: ConversationLimits) {
        self.turns.push_back(turn);
        let mut chars: usize = self.turns.iter().map(Turn::chars).sum();
        while self.turns.len() > 1
            && (self.turns.len() > limits.max_turns || chars > limits.max_chars)
        {
            if let Some(old) = self.turns.pop_front() {
                chars -= old.chars();
                self.dropped += 1;
            }
        }
    }

    /// The kept turns as alternating user and assistant messages.
    pub fn messages(&self) -> Vec<ChatMessage> {
        let mut out = Vec::with_capacity(self.turns.len() * 2);
        for t in &self.turns {
            out.push(ChatMessage::user(t.prompt.clone()));
            out.push(ChatMessage::assistant(t.answer.clone()));
        }
        out
    }
}

/// Every agent's conversation, shared by the reasoners of one team. Each agent sees only its
/// own; with a store, every change is written through and a resumed run continues where the
/// last one stopped.
pub struct Conversations {
    limits: ConversationLimits,
    by_agent: Mutex<HashMap<AgentId, Conversation>>,
    store: Option<Arc<dyn LlmStore>>,
}

impl std::fmt::Debug for Conversations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conversations").field("limits", &self.limits).finish_non_exhaustive()
    }
}

impl Conversations {
    /// Conversations kept in memory only.
    pub fn in_memory(limits: ConversationLimits) -> Self {
        Self { limits, by_agent: Mutex::new(HashMap::new()), store: None }
    }

    /// Conversations written through to `store` (and read from it on first use per agent).
    pub fn stored(limits: ConversationLimits, store: Arc<dyn LlmStore>) -> Self {
        Self { limits, by_agent: Mutex::new(HashMap::new()), store: Some(store) }
    }

    /// The limits.
    pub fn limits(&self) -> ConversationLimits {
        self.limits
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<AgentId, Conversation>> {
        self.by_agent.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of `agent`'s conversation (empty if it has none).
    pub fn get(&self, agent: &AgentId) -> Result<Conversation, BackendError> {
        if let Some(c) = self.lock().get(agent) {
            return Ok(c.clone());
        }
        let loaded = match &self.store {
            Some(store) => store.load_conversation(agent)?.unwrap_or_default(),
            None => Conversation::default(),
        };
        Ok(self.lock().entry(agent.clone()).or_insert(loaded).clone())
    }

    /// Adds a turn to `agent`'s conversation and stores it, with the secrets this process knows
    /// redacted from its question and answer ([`agent_core::secrets`]).
    pub fn push(&self, agent: &AgentId, mut turn: Turn) -> Result<(), BackendError> {
        agent_core::secrets::redact_string(&mut turn.prompt);
        agent_core::secrets::redact_string(&mut turn.answer);
        // Loaded (from the store, the first time) before the lock is taken ...
        self.get(agent)?;
        // ... then read, changed, stored and replaced under one lock, so that two turns of the
        // same agent pushed at once both stay, and the store never keeps the older of them.
        let mut all = self.lock();
        let current = all.entry(agent.clone()).or_default();
        let mut next = current.clone();
        next.push(turn, self.limits);
        if let Some(store) = &self.store {
            store.save_conversation(agent, &next)?;
        }
        *current = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(n: usize, len: usize) -> Turn {
        Turn { decision: "vote".into(), prompt: format!("q{n}"), answer: "a".repeat(len) }
    }

    #[test]
    fn drops_oldest_turns_past_the_turn_limit() {
        let limits = ConversationLimits { max_turns: 3, max_chars: 10_000 };
        let mut c = Conversation::default();
        for n in 0..5 {
            c.push(turn(n, 1), limits);
        }
        assert_eq!(c.turns.len(), 3);
        assert_eq!(c.dropped, 2);
        assert_eq!(c.turns[0].prompt, "q2");
        let m = c.messages();
        assert_eq!(m.len(), 6);
        assert_eq!(m[0].content, "q2");
        assert_eq!(m[5].content, "a");
    }

    #[test]
    fn drops_oldest_turns_past_the_char_limit_but_keeps_the_newest() {
        let limits = ConversationLimits { max_turns: 10, max_chars: 50 };
        let mut c = Conversation::default();
        c.push(turn(0, 20), limits);
        c.push(turn(1, 20), limits);
        assert_eq!(c.turns.len(), 2);
        c.push(turn(2, 20), limits);
        assert_eq!(c.turns.len(), 2, "66 chars > 50: the oldest goes");
        c.push(turn(3, 500), limits);
        assert_eq!(c.turns.len(), 1, "a turn longer than the limit is kept alone");
        assert_eq!(c.turns[0].prompt, "q3");
        assert_eq!(c.dropped, 3);
    }

    /// A store that takes its time to write, as a disk does.
    #[derive(Default)]
    struct SlowStore {
        saved: Mutex<HashMap<AgentId, Conversation>>,
    }

    impl LlmStore for SlowStore {
        fn load_conversation(&self, agent: &AgentId) -> Result<Option<Conversation>, BackendError> {
            Ok(self.saved.lock().unwrap_or_else(PoisonError::into_inner).get(agent).cloned())
        }

        fn save_conversation(
            &self,
            agent: &AgentId,
            conversation: &Conversation,
        ) -> Result<(), BackendError> {
            std::thread::sleep(std::time::Duration::from_millis(1));
            let mut saved = self.saved.lock().unwrap_or_else(PoisonError::into_inner);
            saved.insert(agent.clone(), conversation.clone());
            Ok(())
        }

        fn load_usage(&self) -> Result<Option<crate::ledger::UsageReport>, BackendError> {
            Ok(None)
        }

        fn save_usage(&self, _: &crate::ledger::UsageReport) -> Result<(), BackendError> {
            Ok(())
        }

        fn append_call(&self, _: &mut crate::CallRecord) -> Result<(), BackendError> {
            Ok(())
        }

        fn load_calls(&self) -> Result<Vec<crate::CallRecord>, BackendError> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn turns_pushed_at_once_for_one_agent_are_all_kept_and_stored() {
        let store = Arc::new(SlowStore::default());
        let limits = ConversationLimits { max_turns: 1_000, max_chars: usize::MAX };
        let all = Conversations::stored(limits, store.clone());
        let a = AgentId::new("a");
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (all, a) = (&all, &a);
                scope.spawn(move || {
                    for n in 0..10 {
                        all.push(a, turn(t * 100 + n, 1)).unwrap_or_else(|e| panic!("{e}"));
                    }
                });
            }
        });
        assert_eq!(all.get(&a).map(|c| c.turns.len()).ok(), Some(40), "no turn lost");
        let stored = store.load_conversation(&a).ok().flatten().map(|c| c.turns.len());
        assert_eq!(stored, Some(40), "the store keeps the latest");
    }

    #[test]
    fn agents_do_not_see_each_other() {
        let all = Conversations::in_memory(ConversationLimits::default());
        let a = AgentId::new("a");
        let b = AgentId::new("b");
        all.push(&a, turn(0, 1)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all.get(&a).map(|c| c.turns.len()).ok(), Some(1));
        assert_eq!(all.get(&b).map(|c| c.turns.len()).ok(), Some(0));
    }
}
