//! Where conversations, the usage ledger and the record of every model call are kept:
//! [`LlmStore`], with [`SledLlmStore`] in a run's database (feature `sled`). Without a store
//! they live in memory only.

use agent_state::{AgentId, BackendError};

use crate::calls::CallRecord;
use crate::conversation::Conversation;
use crate::ledger::UsageReport;

/// Keeps the reasoners' state with the run. Calls are short, bounded writes (one record).
pub trait LlmStore: Send + Sync + 'static {
    /// `agent`'s conversation, if one was stored.
    fn load_conversation(&self, agent: &AgentId) -> Result<Option<Conversation>, BackendError>;
    /// Stores `agent`'s conversation, replacing the previous one.
    fn save_conversation(
        &self,
        agent: &AgentId,
        conversation: &Conversation,
    ) -> Result<(), BackendError>;
    /// The stored usage report, if any.
    fn load_usage(&self) -> Result<Option<UsageReport>, BackendError>;
    /// Stores the usage report, replacing the previous one.
    fn save_usage(&self, report: &UsageReport) -> Result<(), BackendError>;
    /// Numbers `record` (sets [`CallRecord::seq`] to one more than the last stored, from 1)
    /// and stores it after the others.
    fn append_call(&self, record: &mut CallRecord) -> Result<(), BackendError>;
    /// Every stored call record, in [`CallRecord::seq`] order.
    fn load_calls(&self) -> Result<Vec<CallRecord>, BackendError>;
}

#[cfg(feature = "sled")]
pub use self::sled_store::{CALLS_TREE, CONVERSATIONS_TREE, SledLlmStore, USAGE_TREE};

#[cfg(feature = "sled")]
mod sled_store {
    use agent_state::{AgentId, BackendError, Versioned, decode, encode};
    use run_store::RunStore;

    use super::LlmStore;
    use crate::calls::CallRecord;
    use crate::conversation::Conversation;
    use crate::ledger::UsageReport;

    /// The tree holding one conversation per agent, keyed by agent id.
    pub const CONVERSATIONS_TREE: &str = "llm.conversations";
    /// The tree holding the usage report under the key `report`.
    pub const USAGE_TREE: &str = "llm.usage";
    const REPORT_KEY: &[u8] = b"report";
    /// The tree holding every model call's record, keyed by its number (8 bytes, big-endian).
    pub const CALLS_TREE: &str = "llm.calls";

    /// Conversations and the ledger in a run's sled database. Written records reach the disk
    /// with the run's next commit (every heartbeat commits).
    pub struct SledLlmStore {
        // Declared before `store`, so they drop first (the store seals only with no tree left).
        conversations: ::sled::Tree,
        usage: ::sled::Tree,
        calls: ::sled::Tree,
        /// The last call number stored (`None` until first needed, then read from the tree);
        /// held while a record is numbered and written, so numbers are never given twice.
        last_call: std::sync::Mutex<Option<u64>>,
        #[allow(dead_code, reason = "keeps the run open as long as the trees are used")]
        store: RunStore,
    }

    impl std::fmt::Debug for SledLlmStore {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("SledLlmStore").finish_non_exhaustive()
        }
    }

    impl SledLlmStore {
        /// The trees of `store`.
        pub fn open(store: &RunStore) -> Result<Self, BackendError> {
            Ok(Self {
                conversations: store.tree(CONVERSATIONS_TREE)?,
                usage: store.tree(USAGE_TREE)?,
                calls: store.tree(CALLS_TREE)?,
                last_call: std::sync::Mutex::new(None),
                store: store.clone(),
            })
        }

        /// Every stored conversation, by agent id.
        pub fn conversations(&self) -> Result<Vec<(AgentId, Conversation)>, BackendError> {
            let mut out = Vec::new();
            for entry in self.conversations.iter() {
                let (k, v) = entry.map_err(|e| sled_error(CONVERSATIONS_TREE, e))?;
                let id = String::from_utf8_lossy(&k).into_owned();
                out.push((AgentId::new(id.clone()), decoded(&v, CONVERSATIONS_TREE, &id)?));
            }
            Ok(out)
        }
    }

    fn sled_error(tree: &str, e: ::sled::Error) -> BackendError {
        BackendError::with_source("sled", format!("tree `{tree}`"), e)
    }

    fn decoded<T: Versioned>(bytes: &[u8], tree: &str, key: &str) -> Result<T, BackendError> {
        decode(bytes).map_err(|e| {
            BackendError::with_source("sled", format!("record `{key}` of tree `{tree}`"), e)
        })
    }

    fn encoded<T: Versioned>(value: &T) -> Result<Vec<u8>, BackendError> {
        encode(value).map_err(|e| BackendError::with_source("sled", "encode", e))
    }

    impl LlmStore for SledLlmStore {
        fn load_conversation(&self, agent: &AgentId) -> Result<Option<Conversation>, BackendError> {
            let key = agent.as_str();
            match self.conversations.get(key).map_err(|e| sled_error(CONVERSATIONS_TREE, e))? {
                Some(v) => decoded(&v, CONVERSATIONS_TREE, key).map(Some),
                None => Ok(None),
            }
        }

        fn save_conversation(
            &self,
            agent: &AgentId,
            conversation: &Conversation,
        ) -> Result<(), BackendError> {
            self.conversations
                .insert(agent.as_str(), encoded(conversation)?)
                .map_err(|e| sled_error(CONVERSATIONS_TREE, e))?;
            Ok(())
        }

        fn load_usage(&self) -> Result<Option<UsageReport>, BackendError> {
            match self.usage.get(REPORT_KEY).map_err(|e| sled_error(USAGE_TREE, e))? {
                Some(v) => decoded(&v, USAGE_TREE, "report").map(Some),
                None => Ok(None),
            }
        }

        fn save_usage(&self, report: &UsageReport) -> Result<(), BackendError> {
            self.usage
                .insert(REPORT_KEY, encoded(report)?)
                .map_err(|e| sled_error(USAGE_TREE, e))?;
            Ok(())
        }

        fn append_call(&self, record: &mut CallRecord) -> Result<(), BackendError> {
            let mut last = self.last_call.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let previous = match *last {
                Some(n) => n,
                None => match self.calls.last().map_err(|e| sled_error(CALLS_TREE, e))? {
                    Some((key, _)) => call_number(&key)?,
                    None => 0,
                },
            };
            record.seq = previous + 1;
            self.calls
                .insert(record.seq.to_be_bytes(), encoded(&*record)?)
                .map_err(|e| sled_error(CALLS_TREE, e))?;
            *last = Some(record.seq);
            Ok(())
        }

        fn load_calls(&self) -> Result<Vec<CallRecord>, BackendError> {
            let mut out = Vec::new();
            for entry in self.calls.iter() {
                let (key, value) = entry.map_err(|e| sled_error(CALLS_TREE, e))?;
                let seq = call_number(&key)?;
                out.push(decoded(&value, CALLS_TREE, &seq.to_string())?);
            }
            Ok(out)
        }
    }

    /// A key of the calls tree as its number.
    fn call_number(key: &[u8]) -> Result<u64, BackendError> {
        let bytes: [u8; 8] = key.try_into().map_err(|_| {
            BackendError::new(
                "sled",
                format!("tree `{CALLS_TREE}` holds a key of {} bytes, not 8", key.len()),
            )
        })?;
        Ok(u64::from_be_bytes(bytes))
    }
}
