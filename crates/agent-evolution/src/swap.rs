//! Hot-swap (docs/concepts.md#evolution): a live OODA agent becomes a genome.

use std::time::Duration;

use agent_pool::Team;
use agent_state::evolution::{EvolutionaryEvent, EvolutionaryEventType, Genome};
use agent_state::{AgentId, CommandOutcome, OperatorCommand};
use serde_json::json;

use crate::recorder::{EventKey, FlightRecorder, RecorderError};

/// A hot-swap that did not happen. The agent is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// No such agent in the team.
    #[error("no agent `{0}` in the team")]
    NoSuchAgent(AgentId),
    /// The command could not be sent.
    #[error("the hot-swap could not be delivered: {0}")]
    Delivery(String),
    /// The agent refused it (not an OODA agent, a tool its supervisor does not hold, a change
    /// being applied, the genome it is already): its words.
    #[error("agent `{agent}` refused the hot-swap: {reason}")]
    Refused {
        /// The agent.
        agent: AgentId,
        /// Why.
        reason: String,
    },
    /// The agent did not apply it within the wait (it may still: a later turn applies it).
    #[error("agent `{agent}` did not apply the hot-swap within {} ms; it is delivered and applies at its next turn", waited.as_millis())]
    NotYet {
        /// The agent.
        agent: AgentId,
        /// How long it waited.
        waited: Duration,
    },
    /// The flight recorder failed after the swap (the swap stands).
    #[error(transparent)]
    Recorder(#[from] RecorderError),
}

/// Hot-swaps `genome` into the live OODA agent `agent` of `team`: the agent takes it as a new
/// version at its next turn (its configuration, runtime settings and code files), audited as
/// an `ooda` `modify_self` event with the outcome `adopted`; `strata rollback` (or
/// [`OperatorCommand::Rollback`]) returns to the version before. The genome goes as an
/// [`OperatorCommand::Adopt`] ([`Team::command`]); waits up to `wait` for the agent's answer
/// ([`Team::command_outcome`]): the new version once applied, or why it refused. With a
/// `recorder`, the swap is recorded as the flight recorder's `mutate` (`evolution_type: hot_swap`) and
/// `survival` (`evolved_from`, `evolved_to`) events.
pub async fn hot_swap(
    team: &Team,
    agent: &AgentId,
    genome: &Genome,
    recorder: Option<&dyn FlightRecorder>,
    wait: Duration,
) -> Result<u64, SwapError> {
    if team.pool().get(agent).is_none() {
        return Err(SwapError::NoSuchAgent(agent.clone()));
    }
    let command = OperatorCommand::Adopt { genome: Box::new(genome.clone()) };
    let sent =
        team.command(agent, &command).await.map_err(|e| SwapError::Delivery(e.to_string()))?;
    let (version, from) = match team.command_outcome(sent, wait).await {
        Some(CommandOutcome::Applied { version, from }) => (version, from),
        Some(CommandOutcome::Refused { reason }) => {
            return Err(SwapError::Refused { agent: agent.clone(), reason });
        }
        None => return Err(SwapError::NotYet { agent: agent.clone(), waited: wait }),
    };
    let services = team.services();
    if let Some(recorder) = recorder {
        let swaps = recorder
            .events()
            .await?
            .iter()
            .filter(|(k, _)| k.phase == EventKey::SWAP && k.seq == 0)
            .count();
        let index = u32::try_from(swaps).unwrap_or(u32::MAX);
        let now = services.clock.now();
        let event = |event_type, payload| EvolutionaryEvent {
            timestamp: now,
            genome_id: genome.id.clone(),
            parent_id: genome.parent_id.clone(),
            generation: genome.generation,
            event_type,
            payload,
            fitness_metrics: None,
            agent_id: agent.to_string(),
            lineage_path: genome.lineage_path.clone(),
        };
        let key = |seq| EventKey { generation: u32::MAX, phase: EventKey::SWAP, index, seq };
        recorder
            .record(
                key(0),
                &event(
                    EvolutionaryEventType::Mutate,
                    json!({
                        "old_genome": from,
                        "new_genome": genome.id,
                        "evolution_type": "hot_swap",
                        "version": version,
                    }),
                ),
            )
            .await?;
        recorder
            .record(
                key(1),
                &event(
                    EvolutionaryEventType::Survival,
                    json!({ "evolved_from": from, "evolved_to": genome.id, "version": version }),
                ),
            )
            .await?;
    }
    Ok(version)
}
