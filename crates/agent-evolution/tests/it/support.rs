//! Shared pieces: a clock that does not move, a deterministic gym, the shipped example.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_evolution::{EvalContext, EvalError, FitnessEvaluator};
use agent_state::evolution::{
    EvolutionSettings, Fitness, FitnessWeights, Gene, Genome, GenomeConfig, SearchSpace,
};
use agent_state::{AgentId, Timestamp};
use async_trait::async_trait;
use serde_json::json;

/// A clock that always says the same time: recorded events are then the same bytes.
pub(crate) struct FixedClock;

impl agent_core::Clock for FixedClock {
    fn now(&self) -> Timestamp {
        Timestamp(1_700_000_000_000)
    }
}

/// A gym whose fitness is a function of the genome: best at 3 retries and a 1 000 ms tool
/// limit, and it counts its evaluations.
#[derive(Default)]
pub(crate) struct Gym {
    pub(crate) evaluations: AtomicUsize,
}

pub(crate) fn gym_fitness(genome: &Genome) -> Fitness {
    let retries = f64::from(genome.config.max_retries);
    let limit =
        genome.config.strategy.get("tool_timeout_ms").and_then(|v| v.as_f64()).unwrap_or(0.0);
    let success = 1.0 - (retries - 3.0).abs() / 5.0;
    let efficiency = if (limit - 1000.0).abs() < 1.0 { 1.0 } else { 0.4 };
    let safety = if genome.config.tools.contains(&"shell".to_owned()) { 1.0 } else { 0.0 };
    Fitness::weighted(success, efficiency, safety, &FitnessWeights::default())
}

#[async_trait]
impl FitnessEvaluator for Gym {
    fn name(&self) -> String {
        "gym".into()
    }

    async fn evaluate(&self, genome: &Genome, _ctx: &EvalContext) -> Result<Fitness, EvalError> {
        self.evaluations.fetch_add(1, Ordering::SeqCst);
        // Evaluations finish in an order that depends on the genome, not the index.
        tokio::task::yield_now().await;
        Ok(gym_fitness(genome))
    }
}

pub(crate) fn genesis() -> Genome {
    let mut config = GenomeConfig::new("executor");
    config.max_retries = 0;
    config.tools = vec!["read_file".into(), "shell".into(), "write_file".into()];
    config.strategy.insert("tool_timeout_ms".into(), json!(5000));
    Genome::genesis(config, config_permissions()).unwrap()
}

pub(crate) fn config_permissions() -> Vec<String> {
    ["read_file", "shell", "write_file"].map(String::from).to_vec()
}

pub(crate) fn space() -> SearchSpace {
    SearchSpace::new(vec![
        Gene::int("max_retries", 0, 5),
        Gene::choice("strategy.tool_timeout_ms", vec![json!(300), json!(1000), json!(5000)]),
        Gene {
            target: agent_state::evolution::GeneTarget::Tools,
            kind: agent_state::evolution::GeneKind::Tools { min: 1 },
        },
    ])
}

pub(crate) fn settings(seed: u64) -> EvolutionSettings {
    let mut s = EvolutionSettings::new(5, 4, seed);
    s.concurrency = 3;
    s
}

/// The repository's `examples/evolve`.
pub(crate) fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/evolve")
}

pub(crate) fn agent(id: &str) -> AgentId {
    AgentId::new(id)
}

pub(crate) fn arc<T>(t: T) -> Arc<T> {
    Arc::new(t)
}
