//! Hot-swap (docs/concepts.md#evolution): a live OODA agent becomes a genome.

use std::time::Duration;

use agent_core::AuditEvent;
use agent_ooda::OodaCommand;
use agent_pool::Team;
use agent_state::evolution::{EvolutionaryEvent, EvolutionaryEventType, Genome};
use agent_state::{Address, AgentId, Message, MessageKind};
use serde_json::{Value, json};

use crate::recorder::{EventKey, FlightRecorder, RecorderError};

/// How often [`hot_swap`] looks at the agent's audit while it waits.
const POLL: Duration = Duration::from_millis(20);

/// A hot-swap that did not happen. The agent is unchanged.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// No such agent in the team.
    #[error("no agent `{0}` in the team")]
    NoSuchAgent(AgentId),
    /// The message could not be sent or the audit read.
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
/// [`OodaCommand::Rollback`]) returns to the version before. Waits up to `wait` for the agent
/// to apply it and returns the new version. With a `recorder`, the swap is recorded as the
/// flight recorder's `mutate` (`evolution_type: hot_swap`) and `survival` (`evolved_from`, `evolved_to`)
/// events.
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
    let services = team.services();
    let before = services
        .audit
        .records(Some(agent))
        .await
        .map_err(|e| SwapError::Delivery(e.to_string()))?
        .len();
    let command = OodaCommand::Adopt { genome: Box::new(genome.clone()) };
    let content = serde_json::to_value(&command).map_err(|e| SwapError::Delivery(e.to_string()))?;
    let now = services.clock.now();
    let message = Message::new(
        services.clock.message_id(),
        Address::System,
        agent.clone(),
        MessageKind::TaskAssign,
        content,
        now,
    );
    services.bus.send(message).await.map_err(|e| SwapError::Delivery(e.to_string()))?;
    let started = tokio::time::Instant::now();
    let (version, from) = loop {
        let records = services
            .audit
            .records(Some(agent))
            .await
            .map_err(|e| SwapError::Delivery(e.to_string()))?;
        let mut found = None;
        for record in records.iter().skip(before) {
            match &record.event {
                AuditEvent::Ooda { ooda } => {
                    let data = &ooda.data;
                    let about = data.get("genome_id").and_then(Value::as_str)
                        == Some(genome.id.as_str())
                        || data.pointer("/change/genome_id").and_then(Value::as_str)
                            == Some(genome.id.as_str());
                    match data.get("outcome").and_then(Value::as_str) {
                        Some("adopted") if about => {
                            let from = data.pointer("/change/from").cloned().unwrap_or(Value::Null);
                            found = Some(Ok((ooda.state_version, from)));
                        }
                        Some("refused") if about => {
                            let reason = data.get("error").and_then(Value::as_str).unwrap_or("");
                            found = Some(Err(reason.to_owned()));
                        }
                        _ => {}
                    }
                }
                AuditEvent::Denied { action, error }
                    if action.starts_with("task_assign") || action.starts_with("command") =>
                {
                    found = Some(Err(error.clone()));
                }
                _ => {}
            }
        }
        match found {
            Some(Ok(done)) => break done,
            Some(Err(reason)) => {
                return Err(SwapError::Refused { agent: agent.clone(), reason });
            }
            None if started.elapsed() >= wait => {
                return Err(SwapError::NotYet { agent: agent.clone(), waited: wait });
            }
            None => tokio::time::sleep(POLL).await,
        }
    };
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
