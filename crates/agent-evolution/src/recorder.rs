//! The flight recorder: an append-only log of [`EvolutionaryEvent`]s, each under a key the
//! evolution derives from where it is (generation, phase, member), so that an event recorded
//! twice (a resumed evolution doing again what it did before a kill) is stored once, and the
//! log reads back in the same order however the evaluations of a generation interleaved.

use std::collections::BTreeMap;
use std::sync::Mutex;

use agent_state::evolution::EvolutionaryEvent;
use agent_state::{BackendError, decode, encode};
use async_trait::async_trait;
use run_store::RunStore;

/// Where an event stands in the log: its generation, the phase of the generation, the member's
/// index in it and a sequence number within that. Keys sort in that order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventKey {
    /// The generation.
    pub generation: u32,
    /// The phase ([`EventKey::SPAWN`] ... [`EventKey::SWAP`]).
    pub phase: u8,
    /// The member's index in its generation (the swap counter for [`EventKey::SWAP`]).
    pub index: u32,
    /// The event's place among those of the same member and phase.
    pub seq: u8,
}

impl EventKey {
    /// A genome's birth and the mutations that made it.
    pub const SPAWN: u8 = 0;
    /// Its evaluation.
    pub const EVAL: u8 = 1;
    /// Its death or survival.
    pub const FATE: u8 = 2;
    /// A hot-swap of a live agent (after the generations).
    pub const SWAP: u8 = 3;

    /// The key's bytes: big-endian, so byte order is key order.
    pub fn to_bytes(self) -> [u8; 10] {
        let mut out = [0u8; 10];
        out[..4].copy_from_slice(&self.generation.to_be_bytes());
        out[4] = self.phase;
        out[5..9].copy_from_slice(&self.index.to_be_bytes());
        out[9] = self.seq;
        out
    }

    /// Reads a key's bytes.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let bytes: [u8; 10] = bytes.try_into().ok()?;
        Some(Self {
            generation: u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            phase: bytes[4],
            index: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]),
            seq: bytes[9],
        })
    }
}

/// A flight recorder could not store or read an event.
#[derive(Debug, thiserror::Error)]
pub enum RecorderError {
    /// The storage failed.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A stored event cannot be read back (another schema version, damage).
    #[error("flight recorder: the event at {key:?} cannot be read: {reason}")]
    Corrupt {
        /// Its key.
        key: Vec<u8>,
        /// Why.
        reason: String,
    },
}

/// An append-only, durable log of evolutionary events.
#[async_trait]
pub trait FlightRecorder: Send + Sync {
    /// Stores `event` under `key` unless an event is stored there already; returns whether it
    /// stored it. When it returns, the event is durable (for a durable recorder).
    async fn record(&self, key: EventKey, event: &EvolutionaryEvent)
    -> Result<bool, RecorderError>;

    /// Every event, in key order.
    async fn events(&self) -> Result<Vec<(EventKey, EvolutionaryEvent)>, RecorderError>;
}

/// A flight recorder in memory (tests, evolutions that need no durability).
#[derive(Debug, Default)]
pub struct MemoryRecorder {
    events: Mutex<BTreeMap<EventKey, EvolutionaryEvent>>,
}

impl MemoryRecorder {
    /// An empty recorder.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl FlightRecorder for MemoryRecorder {
    async fn record(
        &self,
        key: EventKey,
        event: &EvolutionaryEvent,
    ) -> Result<bool, RecorderError> {
        let mut events = self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if events.contains_key(&key) {
            return Ok(false);
        }
        events.insert(key, event.clone());
        Ok(true)
    }

    async fn events(&self) -> Result<Vec<(EventKey, EvolutionaryEvent)>, RecorderError> {
        let events = self.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Ok(events.iter().map(|(k, e)| (*k, e.clone())).collect())
    }
}

/// The sled tree of a run directory that holds the events.
pub const EVENTS_TREE: &str = "evolution_events";

/// A flight recorder in a run directory ([`RunStore`]): every event is committed with
/// `fdatasync` before [`record`](FlightRecorder::record) returns (unless the store was opened
/// with `Durability::NoSync`), so an event the evolution went on from survives `kill -9` and a
/// power loss.
#[derive(Clone)]
pub struct SledRecorder {
    store: RunStore,
    tree: sled::Tree,
}

impl SledRecorder {
    /// The recorder of `store`.
    pub fn open(store: &RunStore) -> Result<Self, RecorderError> {
        Ok(Self { store: store.clone(), tree: store.tree(EVENTS_TREE)? })
    }

    /// The events of a run directory opened read-only.
    pub fn read(store: &RunStore) -> Result<Vec<(EventKey, EvolutionaryEvent)>, RecorderError> {
        let tree = store.tree(EVENTS_TREE)?;
        read_tree(&tree)
    }
}

fn sled_error(e: sled::Error) -> RecorderError {
    RecorderError::Backend(BackendError::with_source("sled", "flight recorder", e))
}

fn read_tree(tree: &sled::Tree) -> Result<Vec<(EventKey, EvolutionaryEvent)>, RecorderError> {
    let mut out = Vec::new();
    for entry in tree.iter() {
        let (key, value) = entry.map_err(sled_error)?;
        let parsed = EventKey::from_bytes(&key).ok_or_else(|| RecorderError::Corrupt {
            key: key.to_vec(),
            reason: "not an event key".into(),
        })?;
        let event: EvolutionaryEvent = decode(&value)
            .map_err(|e| RecorderError::Corrupt { key: key.to_vec(), reason: e.to_string() })?;
        out.push((parsed, event));
    }
    Ok(out)
}

#[async_trait]
impl FlightRecorder for SledRecorder {
    async fn record(
        &self,
        key: EventKey,
        event: &EvolutionaryEvent,
    ) -> Result<bool, RecorderError> {
        let bytes = encode(event).map_err(|e| {
            RecorderError::Backend(BackendError::new(
                "sled",
                format!("cannot encode an event: {e}"),
            ))
        })?;
        let tree = self.tree.clone();
        let key_bytes = key.to_bytes();
        // A compare-and-swap from nothing: an event already there is kept, never overwritten.
        let stored = tokio::task::spawn_blocking(move || {
            tree.compare_and_swap(key_bytes, None as Option<&[u8]>, Some(bytes))
        })
        .await
        .map_err(|e| {
            RecorderError::Backend(BackendError::new("sled", format!("the write task failed: {e}")))
        })?
        .map_err(sled_error)?
        .is_ok();
        if stored {
            self.store.commit().await?;
        }
        Ok(stored)
    }

    async fn events(&self) -> Result<Vec<(EventKey, EvolutionaryEvent)>, RecorderError> {
        let tree = self.tree.clone();
        tokio::task::spawn_blocking(move || read_tree(&tree)).await.map_err(|e| {
            RecorderError::Backend(BackendError::new("sled", format!("the read task failed: {e}")))
        })?
    }
}
