//! The evolution loop: reproducible from its seed, improving, resumable, and robust to
//! evaluators that fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agent_evolution::{
    EvalContext, EvalError, Evolution, EvolutionFile, EvolveError, FitnessEvaluator,
    FlightRecorder, MemoryRecorder, SledRecorder,
};
use agent_state::Timestamp;
use agent_state::evolution::{EvolutionaryEventType, Fitness, Genome, Lineage};
use async_trait::async_trait;
use run_store::{Durability, RunStore};

use crate::support::*;

async fn evolve(
    seed: u64,
    recorder: Arc<dyn FlightRecorder>,
    gym: Arc<Gym>,
) -> agent_evolution::EvolutionReport {
    Evolution::new(settings(seed), space(), genesis(), gym, recorder, arc(FixedClock))
        .unwrap()
        .run()
        .await
        .unwrap()
}

fn bytes(
    events: &[(agent_evolution::EventKey, agent_state::evolution::EvolutionaryEvent)],
) -> Vec<u8> {
    serde_json::to_vec(&events.iter().map(|(k, e)| (k.to_bytes().to_vec(), e)).collect::<Vec<_>>())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seeded_evolution_reproduces_byte_for_byte() {
    let (a, b, c) =
        (arc(MemoryRecorder::new()), arc(MemoryRecorder::new()), arc(MemoryRecorder::new()));
    let ra = evolve(7, a.clone(), arc(Gym::default())).await;
    let rb = evolve(7, b.clone(), arc(Gym::default())).await;
    let (ea, eb) = (a.events().await.unwrap(), b.events().await.unwrap());
    assert!(ea.len() > 20, "{} events", ea.len());
    assert_eq!(bytes(&ea), bytes(&eb), "the same seed, the same flight record");
    assert_eq!(ra.best.id, rb.best.id);
    evolve(8, c.clone(), arc(Gym::default())).await;
    assert_ne!(bytes(&ea), bytes(&c.events().await.unwrap()), "another seed, another evolution");
}

#[tokio::test]
async fn fitness_improves_and_the_elite_is_not_evaluated_twice() {
    let gym = arc(Gym::default());
    let recorder = arc(MemoryRecorder::new());
    let report = evolve(3, recorder.clone(), gym.clone()).await;
    let first = report.generations[0].best;
    let last = report.generations.last().unwrap().best;
    assert!(last > first, "generation 0 best {first}, last {last}");
    assert_eq!(report.generations.len(), 5, "the genesis's generation and four more");
    assert_eq!(gym.evaluations.load(Ordering::SeqCst), report.evaluated);
    assert!(report.reused > 0, "elites carried over reuse their score");
    // Every genome of a later generation descends from one of the generation before.
    let events: Vec<_> = recorder.events().await.unwrap().into_iter().map(|(_, e)| e).collect();
    let spawned = events.iter().filter(|e| e.event_type == EvolutionaryEventType::Spawn).count();
    let evals = events.iter().filter(|e| e.event_type == EvolutionaryEventType::GymEval).count();
    assert_eq!(spawned, evals, "each member born once and scored once");
}

#[tokio::test]
async fn the_exported_tree_matches_the_recorded_events() {
    let recorder = arc(MemoryRecorder::new());
    evolve(11, recorder.clone(), arc(Gym::default())).await;
    let events: Vec<_> = recorder.events().await.unwrap().into_iter().map(|(_, e)| e).collect();
    let tree = Lineage::from_events(&events);
    // Every genome born is a node, with the parent its spawn named.
    for e in events.iter().filter(|e| e.event_type == EvolutionaryEventType::Spawn) {
        let node = &tree.nodes[&e.genome_id];
        let genome: Genome = serde_json::from_value(e.payload["genome"].clone()).unwrap();
        assert_eq!(node.parent_id, genome.parent_id);
        assert_eq!(genome.id, e.genome_id);
    }
    // Its fitness is the best its evaluations recorded; its fate the last recorded.
    for (id, node) in &tree.nodes {
        let best = events
            .iter()
            .filter(|e| &e.genome_id == id && e.event_type == EvolutionaryEventType::GymEval)
            .filter_map(|e| e.fitness_metrics.as_ref()?.get("overall_fitness").copied())
            .fold(None, |m: Option<f64>, f| Some(m.map_or(f, |m| m.max(f))));
        assert_eq!(node.fitness, best);
    }
    let dot = tree.to_dot();
    for (parent, child) in tree.edges() {
        assert!(dot.contains(&format!("\"{parent}\" -> \"{child}\"")));
    }
    assert_eq!(dot.matches(" -> ").count(), tree.edges().len());
    assert_eq!(tree.to_json()["nodes"].as_array().unwrap().len(), tree.nodes.len());
}

/// An evaluator that finishes `budget` evaluations and then never answers: the evolution is
/// killed there (its future dropped, as the process would be).
struct Stalls {
    budget: usize,
    done: AtomicUsize,
}

#[async_trait]
impl FitnessEvaluator for Stalls {
    fn name(&self) -> String {
        "gym".into()
    }
    async fn evaluate(&self, genome: &Genome, _ctx: &EvalContext) -> Result<Fitness, EvalError> {
        if self.done.fetch_add(1, Ordering::SeqCst) >= self.budget {
            std::future::pending::<()>().await;
        }
        Ok(gym_fitness(genome))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_evolution_resumes_from_its_last_finished_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("evo");
    let store = RunStore::create(&run, "evo", Timestamp(0), Durability::Synced).unwrap();
    let recorder = arc(SledRecorder::open(&store).unwrap());
    let stalls = arc(Stalls { budget: 7, done: AtomicUsize::new(0) });
    let killed =
        Evolution::new(settings(5), space(), genesis(), stalls, recorder, arc(FixedClock)).unwrap();
    let cut = tokio::time::timeout(Duration::from_secs(2), killed.run()).await;
    assert!(cut.is_err(), "the evolution stalls in its eighth evaluation");
    drop(killed);
    drop(store);

    let store = RunStore::open(&run, Durability::Synced).unwrap();
    let recorder = arc(SledRecorder::open(&store).unwrap());
    let recorded = recorder.events().await.unwrap();
    let evals =
        |events: &[(agent_evolution::EventKey, agent_state::evolution::EvolutionaryEvent)]| {
            events.iter().filter(|(_, e)| e.event_type == EvolutionaryEventType::GymEval).count()
        };
    assert!(evals(&recorded) >= 7, "the finished evaluations were recorded before the kill");
    let gym = arc(Gym::default());
    let resumed = Evolution::new(
        settings(5),
        space(),
        genesis(),
        gym.clone(),
        recorder.clone(),
        arc(FixedClock),
    )
    .unwrap()
    .run()
    .await
    .unwrap();

    // The same evolution uninterrupted, for comparison.
    let whole = arc(MemoryRecorder::new());
    let full_gym = arc(Gym::default());
    let reference = evolve(5, whole.clone(), full_gym.clone()).await;
    assert_eq!(resumed.best.id, reference.best.id);
    assert_eq!(
        bytes(&recorder.events().await.unwrap()),
        bytes(&whole.events().await.unwrap()),
        "the resumed flight record is the uninterrupted one"
    );
    let before = recorded
        .iter()
        .filter(|(_, e)| {
            e.event_type == EvolutionaryEventType::GymEval
                && !e.payload["reused"].as_bool().unwrap_or(false)
        })
        .count();
    assert_eq!(
        gym.evaluations.load(Ordering::SeqCst) + before,
        full_gym.evaluations.load(Ordering::SeqCst),
        "no finished evaluation was run again"
    );
}

/// An evaluator that fails in every way there is, by genome.
struct Broken;

#[async_trait]
impl FitnessEvaluator for Broken {
    fn name(&self) -> String {
        "broken".into()
    }
    async fn evaluate(&self, genome: &Genome, ctx: &EvalContext) -> Result<Fitness, EvalError> {
        match ctx.index % 4 {
            0 => Ok(gym_fitness(genome)),
            1 => Err(EvalError::new("the gym is closed")),
            2 => {
                let mut f = gym_fitness(genome);
                f.overall = f64::NAN;
                Ok(f)
            }
            _ => panic!("the gym fell over"),
        }
    }
}

#[tokio::test]
async fn a_failing_evaluator_scores_the_genome_as_failed_with_the_reason() {
    let recorder = arc(MemoryRecorder::new());
    let mut s = settings(2);
    s.population = 4;
    s.generations = 2;
    let report =
        Evolution::new(s, space(), genesis(), arc(Broken), recorder.clone(), arc(FixedClock))
            .unwrap()
            .run()
            .await
            .unwrap();
    let failures: Vec<String> = recorder
        .events()
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, e)| e.event_type == EvolutionaryEventType::GymEval)
        .filter_map(|(_, e)| e.payload["failure"].as_str().map(str::to_owned))
        .collect();
    assert!(failures.iter().any(|f| f.contains("the gym is closed")), "{failures:?}");
    assert!(failures.iter().any(|f| f.contains("NaN")), "{failures:?}");
    assert!(failures.iter().any(|f| f.contains("panicked")), "{failures:?}");
    assert!(report.best_fitness.failure.is_none(), "the best is a genome that was scored");
}

#[tokio::test]
async fn bad_settings_and_another_evolutions_record_are_refused() {
    let text = std::fs::read_to_string(example().join("evolution.toml")).unwrap();
    let zero = text.replace("population = 4", "population = 0");
    let err = EvolutionFile::parse(&example().join("evolution.toml"), &zero).unwrap_err();
    assert!(err.to_string().contains("`population` is 0"), "{err}");
    let unknown = text.replace("seed = 42", "seed = 42\nsede = 1");
    let err = EvolutionFile::parse(&example().join("evolution.toml"), &unknown).unwrap_err();
    assert!(err.to_string().contains("sede"), "{err}");
    let bad_gene = text.replace("max = 5", "max = -1");
    let err = EvolutionFile::parse(&example().join("evolution.toml"), &bad_gene).unwrap_err();
    assert!(err.to_string().contains("genes.max_retries"), "{err}");

    // A recorder holding another genesis's evolution is refused, untouched.
    let recorder = arc(MemoryRecorder::new());
    evolve(1, recorder.clone(), arc(Gym::default())).await;
    let before = recorder.events().await.unwrap().len();
    let mut other = genesis().config;
    other.max_retries = 1;
    let other = Genome::genesis(other, config_permissions()).unwrap();
    let err = Evolution::new(
        settings(1),
        space(),
        other,
        arc(Gym::default()),
        recorder.clone(),
        arc(FixedClock),
    )
    .unwrap()
    .run()
    .await
    .unwrap_err();
    assert!(matches!(err, EvolveError::OtherEvolution { .. }), "{err}");
    assert_eq!(recorder.events().await.unwrap().len(), before);
}

#[tokio::test]
async fn a_prompt_gene_may_take_variants_the_reasoner_writes() {
    use agent_core::{ReasoningRequest, ScriptedAnswer, ScriptedReasoner};
    use agent_state::evolution::{Gene, GeneKind, GeneTarget, SearchSpace};

    let writer = ScriptedReasoner::from_fn(|request| match request {
        ReasoningRequest::Compose { .. } => ScriptedAnswer::Compose("Verify every result.".into()),
        _ => ScriptedAnswer::Fallback,
    });
    let space = SearchSpace::new(vec![Gene {
        target: GeneTarget::Prompt,
        kind: GeneKind::Prompt { variants: vec![], from_reasoner: true },
    }]);
    let recorder = arc(MemoryRecorder::new());
    let mut s = settings(4);
    s.population = 2;
    s.generations = 1;
    Evolution::new(s, space, genesis(), arc(Gym::default()), recorder.clone(), arc(FixedClock))
        .unwrap()
        .with_writer(arc(writer))
        .run()
        .await
        .unwrap();
    let children: Vec<Genome> = recorder
        .events()
        .await
        .unwrap()
        .into_iter()
        .filter(|(k, e)| k.generation == 1 && e.event_type == EvolutionaryEventType::Spawn)
        .map(|(_, e)| serde_json::from_value(e.payload["genome"].clone()).unwrap())
        .collect();
    assert!(!children.is_empty());
    assert!(children.iter().any(|c| c.config.prompt == "Verify every result."), "{children:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_from_any_point_of_the_record_ends_as_the_uninterrupted_evolution() {
    let whole = arc(MemoryRecorder::new());
    evolve(21, whole.clone(), arc(Gym::default())).await;
    let all = whole.events().await.unwrap();
    // A kill can stop the evolution after any recorded event: births half recorded, some
    // evaluations of a generation done, fates half written.
    for cut in (0..all.len()).step_by(3) {
        let partial = arc(MemoryRecorder::new());
        for (key, event) in &all[..cut] {
            partial.record(*key, event).await.unwrap();
        }
        evolve(21, partial.clone(), arc(Gym::default())).await;
        let resumed = partial.events().await.unwrap();
        let first_difference = all.iter().zip(&resumed).position(|(a, b)| a != b);
        assert!(
            first_difference.is_none() && resumed.len() == all.len(),
            "resumed after {cut} of {} events, the record differs at {first_difference:?}: {}",
            all.len(),
            first_difference.map_or(String::new(), |i| format!(
                "{}\nbecame\n{}",
                serde_json::to_string(&all[i].1).unwrap(),
                serde_json::to_string(&resumed[i].1).unwrap()
            ))
        );
    }
    // Another seed on the same record is another evolution: refused, nothing added.
    let err = Evolution::new(
        settings(22),
        space(),
        genesis(),
        arc(Gym::default()),
        whole.clone(),
        arc(FixedClock),
    )
    .unwrap()
    .run()
    .await
    .unwrap_err();
    assert!(matches!(err, EvolveError::OtherEvolution { .. }), "{err}");
    assert_eq!(whole.events().await.unwrap().len(), all.len());
}

#[tokio::test]
async fn a_resume_may_run_more_evaluations_at_once() {
    let recorder = arc(MemoryRecorder::new());
    evolve(31, recorder.clone(), arc(Gym::default())).await;
    let before = bytes(&recorder.events().await.unwrap());
    let mut faster = settings(31);
    faster.concurrency = 8;
    Evolution::new(
        faster,
        space(),
        genesis(),
        arc(Gym::default()),
        recorder.clone(),
        arc(FixedClock),
    )
    .unwrap()
    .run()
    .await
    .unwrap();
    assert_eq!(
        bytes(&recorder.events().await.unwrap()),
        before,
        "the same evolution, all taken from the record"
    );
}
