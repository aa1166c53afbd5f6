//! Any bytes as a stored record of each kind the stores keep (messages, decisions, boards,
//! configurations, transitions, metrics, agent records, tool results, task outcomes, audit
//! records, conversations, usage reports, evolutionary events, genomes): `agent_state::decode`
//! gives the record or a `DecodeError`, never a panic, and a record that decodes encodes again.

#![no_main]

use agent_state::{Versioned, decode, encode};
use libfuzzer_sys::fuzz_target;

fn round_trip<T: Versioned>(data: &[u8]) {
    if let Ok(record) = decode::<T>(data) {
        assert!(encode(&record).is_ok(), "a decoded {} encodes again", T::KIND);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, bytes)) = data.split_first() else { return };
    match which % 14 {
        0 => round_trip::<agent_state::Message>(bytes),
        1 => round_trip::<agent_state::Decision>(bytes),
        2 => round_trip::<agent_state::BoardSnapshot>(bytes),
        3 => round_trip::<agent_state::AgentConfig>(bytes),
        4 => round_trip::<agent_state::TransitionRecord>(bytes),
        5 => round_trip::<agent_state::AgentMetrics>(bytes),
        6 => round_trip::<agent_core::AgentRecord>(bytes),
        7 => round_trip::<agent_core::ToolRecord>(bytes),
        8 => round_trip::<agent_core::OutcomeRecord>(bytes),
        9 => round_trip::<agent_core::AuditRecord>(bytes),
        10 => round_trip::<agent_llm::Conversation>(bytes),
        11 => round_trip::<agent_llm::UsageReport>(bytes),
        12 => round_trip::<agent_state::evolution::EvolutionaryEvent>(bytes),
        _ => {
            // A genome read back is checked against its id; a forged one is refused, never a
            // panic.
            if let Ok(genome) = decode::<agent_state::evolution::Genome>(bytes) {
                let _ = genome.verify();
                assert!(encode(&genome).is_ok(), "a decoded genome encodes again");
            }
        }
    }
});
