//! Where conversations and the usage ledger are kept: [`LlmStore`], with [`SledLlmStore`] in
//! a run's database (feature `sled`). Without a store both live in memory only.

use agent_state::{AgentId, BackendError};

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
}

#[cfg(feature = "sled")]
pub use self::sled_store::{CONVERSATIONS_TREE, SledLlmStore, USAGE_TREE};

#[cfg(feature = "sled")]
mod sled_store {
    use agent_state::{AgentId, BackendError, Versioned, decode, encode};
    use run_store::RunStore;

    use super::LlmStore;
    use crate::conversation::Conversation;
    use crate::ledger::UsageReport;

    /// The tree holding one conversation per agent, keyed by agent id.
    pub const CONVERSATIONS_TREE: &str = "llm.conversations";
    /// The tree holding the usage report under the key `report`.
    pub const USAGE_TREE: &str = "llm.usage";
    const REPORT_KEY: &[u8] = b"report";

    /// Conversations and the ledger in a run's sled database. Written records reach the disk
    /// with the run's next commit (every heartbeat commits).
    pub struct SledLlmStore {
        // Declared before `store`, so they drop first (the store seals only with no tree left).
        conversations: ::sled::Tree,
        usage: ::sled::Tree,
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
    }
}
