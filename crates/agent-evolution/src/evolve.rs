//! The evolution loop: generations of genomes spawned from the best of the last, evaluated
//! concurrently within a bound, selected, every step recorded in the flight recorder.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use agent_core::{Clock, Persona, Reasoner};
use agent_state::evolution::{
    EvolutionError, EvolutionSettings, EvolutionaryEvent, EvolutionaryEventType, Fate, Fitness,
    GeneKind, GeneTarget, Genome, GenomeId, SearchSpace, SeededRng, select,
};
use agent_state::ooda::{Modification, ModificationType};
use agent_state::{AgentConfig, AgentLayer};
use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::recorder::{EventKey, FlightRecorder, RecorderError};

/// Where an evaluation stands: which generation, which member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EvalContext {
    /// The generation.
    pub generation: u32,
    /// The member's index in it.
    pub index: u32,
    /// The agent id its events carry (`evolution/<generation>/<index>`).
    pub agent_id: String,
}

/// An evaluation that could not score its genome. The evolution records the genome as failed
/// (overall fitness 0) with this reason and goes on.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct EvalError {
    /// What went wrong.
    pub reason: String,
}

impl EvalError {
    /// An error saying `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self { reason: reason.into() }
    }
}

/// Scores a genome: named scores and an overall fitness in 0..=1. The
/// default combination of success, efficiency and safety is
/// [`FitnessWeights`](agent_state::evolution::FitnessWeights)' 0.4 / 0.3 / 0.3.
#[async_trait]
pub trait FitnessEvaluator: Send + Sync + 'static {
    /// A name for the records, such as `suite:examples/evolve/suite`.
    fn name(&self) -> String;

    /// Evaluates `genome`. An error, a panic or a fitness that is not finite or outside 0..=1
    /// scores the genome as failed, with the reason.
    async fn evaluate(&self, genome: &Genome, ctx: &EvalContext) -> Result<Fitness, EvalError>;
}

/// An evolution that cannot go on: its settings are wrong, or its recorder failed.
#[derive(Debug, thiserror::Error)]
pub enum EvolveError {
    /// The settings, the search space or the genesis are not valid.
    #[error(transparent)]
    Invalid(#[from] EvolutionError),
    /// The flight recorder failed; what was recorded before stays.
    #[error(transparent)]
    Recorder(#[from] RecorderError),
    /// The recorder holds an evolution of another genesis or other settings (a seed, a
    /// population).
    #[error(
        "the flight recorder holds another evolution (its {found}; this one's {expected}); use a new run directory"
    )]
    OtherEvolution {
        /// The recorded genesis.
        found: String,
        /// This evolution's.
        expected: String,
    },
}

/// One generation's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GenerationReport {
    /// The generation.
    pub generation: u32,
    /// Its members.
    pub members: usize,
    /// The best overall fitness.
    pub best: f64,
    /// The mean overall fitness.
    pub mean: f64,
    /// How many survived.
    pub survived: usize,
    /// How many died.
    pub died: usize,
}

/// What an evolution found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EvolutionReport {
    /// The best genome of all generations.
    pub best: Genome,
    /// Its fitness.
    pub best_fitness: Fitness,
    /// Each generation's figures, in order.
    pub generations: Vec<GenerationReport>,
    /// Evaluations run by this call.
    pub evaluated: usize,
    /// Evaluations taken from the flight recorder (a resumed evolution) or from an earlier
    /// evaluation of the same genome (an elite carried over).
    pub reused: usize,
}

/// An evolution: settings, a search space, a genesis, an evaluator and a flight recorder.
pub struct Evolution {
    settings: EvolutionSettings,
    space: SearchSpace,
    genesis: Genome,
    evaluator: Arc<dyn FitnessEvaluator>,
    recorder: Arc<dyn FlightRecorder>,
    clock: Arc<dyn Clock>,
    writer: Option<Arc<dyn Reasoner>>,
    progress: Option<Progress>,
}

/// Called with each generation's figures as soon as it is evaluated and selected.
pub type Progress = Arc<dyn Fn(&GenerationReport) + Send + Sync>;

/// A generation's member: its genome and the mutations that made it.
#[derive(Clone)]
struct Member {
    genome: Genome,
    mutations: Vec<Modification>,
    elite: bool,
}

impl Evolution {
    /// An evolution of `genesis` within `space`, checked: the settings, the space and the
    /// genesis must be valid, and every gene must fit the genesis.
    pub fn new(
        settings: EvolutionSettings,
        space: SearchSpace,
        genesis: Genome,
        evaluator: Arc<dyn FitnessEvaluator>,
        recorder: Arc<dyn FlightRecorder>,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, EvolveError> {
        Self::check(&settings, &space, &genesis)?;
        Ok(Self {
            settings,
            space,
            genesis,
            evaluator,
            recorder,
            clock,
            writer: None,
            progress: None,
        })
    }

    /// Checks what [`new`](Self::new) checks, without an evaluator or a recorder: so that a
    /// caller refuses bad input before it creates anything.
    pub fn check(
        settings: &EvolutionSettings,
        space: &SearchSpace,
        genesis: &Genome,
    ) -> Result<(), EvolveError> {
        settings.validate()?;
        space.validate()?;
        genesis.verify()?;
        if genesis.parent_id.is_some() || genesis.generation != 0 {
            return Err(EvolutionError::Field {
                field: "genesis".into(),
                reason: "must be a genesis (generation 0, no parent)".into(),
            }
            .into());
        }
        for gene in &space.genes {
            space.check(&gene.target, &genesis.config.get(&gene.target)).or_else(|e| {
                // A genesis may start outside a prompt's variant list or without the strategy
                // parameter; numbers and choices must start within their bounds.
                match (&gene.target, &genesis.config.get(&gene.target)) {
                    (GeneTarget::Prompt, _) | (GeneTarget::Strategy(_), Value::Null) => Ok(()),
                    _ => Err(EvolutionError::Field {
                        field: format!("genesis.{}", gene.target),
                        reason: format!("starts outside its gene: {e}"),
                    }),
                }
            })?;
        }
        Ok(())
    }

    /// Lets a prompt gene with `from_reasoner` ask `reasoner` to write variants
    /// ([`Reasoner::compose`]); without one, or when it cannot write, such a gene uses its
    /// listed variants only.
    #[must_use]
    pub fn with_writer(mut self, reasoner: Arc<dyn Reasoner>) -> Self {
        self.writer = Some(reasoner);
        self
    }

    /// Calls `progress` with each generation's figures as the evolution goes (a resumed
    /// evolution reports the generations it takes from its record too).
    #[must_use]
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// The settings.
    pub fn settings(&self) -> &EvolutionSettings {
        &self.settings
    }

    /// Runs every generation and returns the best genome. Whatever the flight recorder holds
    /// already (an evolution killed before) is taken from it: births, evaluations and fates
    /// recorded are not done again, so a killed evolution resumes from its last finished
    /// evaluation and ends as it would have.
    pub async fn run(&self) -> Result<EvolutionReport, EvolveError> {
        if self.writer.is_none() && needs_writer(&self.space) {
            return Err(EvolutionError::Field {
                field: "genes.prompt".into(),
                reason: "has no variants and asks the reasoner to write them, but this evolution has none (Evolution::with_writer); list `variants`".into(),
            }
            .into());
        }
        let recorded: BTreeMap<EventKey, EvolutionaryEvent> =
            self.recorder.events().await?.into_iter().collect();
        self.check_recorded(&recorded)?;
        let mut tally = Tally::default();
        for generation in 0..=self.settings.generations {
            self.generation(generation, &recorded, &mut tally).await?;
        }
        let Tally { best, reports, evaluated, reused, .. } = tally;
        let Some((best, best_fitness)) = best else {
            return Err(EvolutionError::Field {
                field: "generations".into(),
                reason: "produced no genome".into(),
            }
            .into());
        };
        Ok(EvolutionReport { best, best_fitness, generations: reports, evaluated, reused })
    }

    /// Refuses a recorder that holds another evolution: another genesis, or other settings.
    fn check_recorded(
        &self,
        recorded: &BTreeMap<EventKey, EvolutionaryEvent>,
    ) -> Result<(), EvolveError> {
        let Some(first) = recorded.get(&EventKey { generation: 0, phase: 0, index: 0, seq: 0 })
        else {
            return Ok(());
        };
        let settings = identity(serde_json::to_value(&self.settings).unwrap_or_default());
        if first.genome_id != self.genesis.id {
            return Err(EvolveError::OtherEvolution {
                found: format!("genesis {}", first.genome_id),
                expected: format!("genesis {}", self.genesis.id),
            });
        }
        let recorded_settings = first.payload.get("settings").cloned().map(identity);
        if recorded_settings.is_some_and(|s| s != settings) {
            return Err(EvolveError::OtherEvolution {
                found: format!("settings {}", first.payload["settings"]),
                expected: format!("settings {settings}"),
            });
        }
        Ok(())
    }

    /// One generation: its members born (or taken from the record), evaluated, selected and
    /// their fates recorded; its figures reported; its survivors the next one's parents.
    async fn generation(
        &self,
        generation: u32,
        recorded: &BTreeMap<EventKey, EvolutionaryEvent>,
        tally: &mut Tally,
    ) -> Result<(), EvolveError> {
        let members = if generation == 0 {
            vec![Member { genome: self.genesis.clone(), mutations: Vec::new(), elite: false }]
        } else {
            self.breed(generation, &tally.parents, &tally.elite, recorded).await?
        };
        for (index, member) in members.iter().enumerate() {
            self.record_birth(generation, index, member).await?;
        }
        let (fitness, ran, took) =
            self.evaluate(generation, &members, recorded, &tally.scores).await?;
        tally.evaluated += ran;
        tally.reused += took;
        for (member, fit) in members.iter().zip(&fitness) {
            tally.score(member, fit);
        }
        let scored: Vec<(&GenomeId, f64)> =
            members.iter().zip(&fitness).map(|(m, f)| (&m.genome.id, f.overall)).collect();
        let selection = select(&scored, &self.settings);
        for (index, member) in members.iter().enumerate() {
            let fate = selection.fates[index];
            self.record_fate(generation, index, member, &fitness[index], fate).await?;
        }
        let report = generation_report(generation, &fitness, &selection.fates);
        tracing::info!(
            generation,
            best = report.best,
            mean = report.mean,
            survived = report.survived,
            "generation evaluated"
        );
        if let Some(progress) = &self.progress {
            progress(&report);
        }
        tally.reports.push(report);
        tally.parents = selection.ranked.iter().map(|i| members[*i].genome.clone()).collect();
        tally.elite = selection.elite.iter().map(|i| members[*i].genome.clone()).collect();
        if tally.parents.is_empty() {
            // Nobody survived: the next generation starts again from the best so far.
            if let Some((genome, _)) = &tally.best {
                tally.parents.push(genome.clone());
            }
        }
        Ok(())
    }

    /// The members of `generation`: the elite of the last one, unchanged, then children of
    /// its survivors (best first, in turn) until the population is full. A member recorded
    /// already (a resumed evolution) is taken from the record.
    async fn breed(
        &self,
        generation: u32,
        parents: &[Genome],
        elite: &[Genome],
        recorded: &BTreeMap<EventKey, EvolutionaryEvent>,
    ) -> Result<Vec<Member>, EvolveError> {
        let population = self.settings.population as usize;
        let mut members: Vec<Member> = elite
            .iter()
            .take(population)
            .map(|g| Member { genome: g.clone(), mutations: Vec::new(), elite: true })
            .collect();
        let mut seen: BTreeSet<GenomeId> = members.iter().map(|m| m.genome.id.clone()).collect();
        let elites = members.len();
        while members.len() < population {
            let index = members.len();
            let key = EventKey { generation, phase: EventKey::SPAWN, index: index as u32, seq: 0 };
            if let Some(event) = recorded.get(&key)
                && let Some(member) = recorded_member(event)
            {
                seen.insert(member.genome.id.clone());
                members.push(member);
                continue;
            }
            // The n-th child's parent is the n-th survivor, in turn: where it stands, not how
            // many children this call made, so a member taken from the record changes nothing.
            let Some(parent) = parents.get((index - elites) % parents.len().max(1)) else {
                break;
            };
            // Each child draws from its own stream: the same seed gives the same child
            // whatever was recorded before it.
            let stream = (u64::from(generation) << 32) | index as u64;
            let mut rng = SeededRng::derive(self.settings.seed, stream);
            let mut made = None;
            for _attempt in 0..16 {
                let (genome, mutations) = self.mutate(parent, &mut rng).await?;
                if seen.insert(genome.id.clone()) {
                    made = Some(Member { genome, mutations, elite: false });
                    break;
                }
            }
            match made {
                Some(member) => members.push(member),
                // The space is too small for more distinct children: a smaller generation.
                None => break,
            }
        }
        Ok(members)
    }

    /// A child of `parent` with the settings' number of random mutations.
    async fn mutate(
        &self,
        parent: &Genome,
        rng: &mut SeededRng,
    ) -> Result<(Genome, Vec<Modification>), EvolveError> {
        let mut mutations = Vec::new();
        let mut current = parent.clone();
        for _ in 0..self.settings.mutations {
            let mut change = self.space.mutation(&current, rng)?;
            if change.modification_type == ModificationType::Prompt
                && let Some(text) = self.written_prompt(&current, rng).await
            {
                change.change = json!({ "text": text });
            }
            current = current.spawn(&change, &self.space)?;
            mutations.push(change);
        }
        // One child of `parent`, however many mutations made it.
        current.parent_id = Some(parent.id.clone());
        current.generation = parent.generation + 1;
        current.lineage_path = parent.lineage_path.clone();
        current.lineage_path.push(current.id.clone());
        Ok((current, mutations))
    }

    /// A prompt the writer reasoner proposes for a prompt gene with `from_reasoner`, on about
    /// half the draws; `None` otherwise or when it cannot write.
    async fn written_prompt(&self, genome: &Genome, rng: &mut SeededRng) -> Option<String> {
        let writer = self.writer.as_ref()?;
        let gene = self.space.gene(&GeneTarget::Prompt)?;
        let GeneKind::Prompt { from_reasoner: true, variants } = &gene.kind else { return None };
        if !variants.is_empty() && rng.below(2) == 0 {
            return None;
        }
        let config = AgentConfig::new("evolution", "evolution", AgentLayer::Bottom);
        let persona =
            Persona { config: &config, system_prompt: "", tools: &[], roles: &[], domains: &[] };
        let instruction = "Rewrite these instructions for an AI agent so that it does its \
                           tasks more reliably and with fewer actions. Answer with the new \
                           instructions only.";
        match writer.compose(persona, instruction, &genome.config.prompt).await {
            Ok(text) if !text.trim().is_empty() => Some(text.trim().to_owned()),
            Ok(_) => None,
            Err(e) => {
                tracing::debug!(error = %e, "the writer cannot propose a prompt; using the variants");
                None
            }
        }
    }

    /// Scores `members`: from the record, from an earlier evaluation of the same genome, or
    /// by the evaluator (at most `concurrency` at once, each recorded as it finishes). Returns
    /// the fitness of each and how many were run and reused.
    async fn evaluate(
        &self,
        generation: u32,
        members: &[Member],
        recorded: &BTreeMap<EventKey, EvolutionaryEvent>,
        scores: &BTreeMap<GenomeId, Fitness>,
    ) -> Result<(Vec<Fitness>, usize, usize), EvolveError> {
        let mut fitness: Vec<Option<Fitness>> = vec![None; members.len()];
        let (mut ran, mut reused) = (0, 0);
        for (index, member) in members.iter().enumerate() {
            let key = EventKey { generation, phase: EventKey::EVAL, index: index as u32, seq: 0 };
            if let Some(event) = recorded.get(&key)
                && event.genome_id == member.genome.id
            {
                fitness[index] = Some(fitness_of(event));
                reused += 1;
            } else if let Some(earlier) = scores.get(&member.genome.id) {
                self.record_eval(generation, index, member, earlier, true).await?;
                fitness[index] = Some(earlier.clone());
                reused += 1;
            }
        }
        let limit = Arc::new(Semaphore::new(self.settings.concurrency as usize));
        let mut running = JoinSet::new();
        for (index, member) in members.iter().enumerate() {
            if fitness[index].is_some() {
                continue;
            }
            let (evaluator, genome, limit) =
                (self.evaluator.clone(), member.genome.clone(), limit.clone());
            let ctx = EvalContext {
                generation,
                index: index as u32,
                agent_id: agent_id(generation, index),
            };
            running.spawn(async move {
                let _permit = limit.acquire_owned().await;
                // The evaluation runs in a task of its own, so a panic in it is a failed
                // genome, not a failed evolution.
                let evaluation =
                    tokio::spawn(async move { evaluator.evaluate(&genome, &ctx).await }).await;
                let fit = match evaluation {
                    Ok(Ok(fit)) => match fit.check() {
                        Ok(()) => fit,
                        Err(e) => Fitness::failed(e.to_string()),
                    },
                    Ok(Err(e)) => Fitness::failed(format!("the evaluation failed: {e}")),
                    Err(e) => Fitness::failed(format!("the evaluation panicked: {e}")),
                };
                (index, fit)
            });
        }
        while let Some(done) = running.join_next().await {
            let (index, fit) = match done {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::error!(error = %e, "an evaluation task was lost");
                    continue;
                }
            };
            self.record_eval(generation, index, &members[index], &fit, false).await?;
            fitness[index] = Some(fit);
            ran += 1;
        }
        let fitness = fitness
            .into_iter()
            .map(|f| f.unwrap_or_else(|| Fitness::failed("the evaluation task was lost")))
            .collect();
        Ok((fitness, ran, reused))
    }

    fn event(
        &self,
        member: &Member,
        generation: u32,
        index: usize,
        event_type: EvolutionaryEventType,
        payload: Value,
        fitness: Option<&Fitness>,
    ) -> EvolutionaryEvent {
        EvolutionaryEvent {
            timestamp: self.clock.now(),
            genome_id: member.genome.id.clone(),
            parent_id: if member.elite { None } else { member.genome.parent_id.clone() },
            generation,
            event_type,
            payload,
            fitness_metrics: fitness.map(metrics),
            agent_id: agent_id(generation, index),
            lineage_path: member.genome.lineage_path.clone(),
        }
    }

    async fn record_birth(
        &self,
        generation: u32,
        index: usize,
        member: &Member,
    ) -> Result<(), EvolveError> {
        // The spawn holds everything the member is (its mutations too), so that a resumed
        // evolution rebuilds it from this one event and records what a kill cut short.
        let mut payload = json!({
            "genome": member.genome,
            "parent_genome": member.genome.parent_id,
            "elite": member.elite,
            "mutations": member.mutations,
        });
        if generation == 0 {
            // What the evolution is: a resume with other settings is refused.
            payload["settings"] = serde_json::to_value(&self.settings).unwrap_or_default();
        }
        let mut event =
            self.event(member, generation, index, EvolutionaryEventType::Spawn, payload, None);
        if member.elite {
            // An elite is not born again: its spawn names its real parent.
            event.parent_id = member.genome.parent_id.clone();
        }
        let key = EventKey { generation, phase: EventKey::SPAWN, index: index as u32, seq: 0 };
        self.recorder.record(key, &event).await?;
        for (seq, mutation) in member.mutations.iter().enumerate() {
            let payload = json!({
                "mutation": mutation,
                "field": mutation.target,
                "parent_genome": member.genome.parent_id,
            });
            let event =
                self.event(member, generation, index, EvolutionaryEventType::Mutate, payload, None);
            let key = EventKey {
                generation,
                phase: EventKey::SPAWN,
                index: index as u32,
                seq: u8::try_from(seq + 1).unwrap_or(u8::MAX),
            };
            self.recorder.record(key, &event).await?;
        }
        Ok(())
    }

    async fn record_eval(
        &self,
        generation: u32,
        index: usize,
        member: &Member,
        fitness: &Fitness,
        reused: bool,
    ) -> Result<(), EvolveError> {
        let payload = json!({
            "evaluation_complete": true,
            "evaluator": self.evaluator.name(),
            "reused": reused,
            "failure": fitness.failure,
        });
        let event = self.event(
            member,
            generation,
            index,
            EvolutionaryEventType::GymEval,
            payload,
            Some(fitness),
        );
        let key = EventKey { generation, phase: EventKey::EVAL, index: index as u32, seq: 0 };
        self.recorder.record(key, &event).await?;
        Ok(())
    }

    async fn record_fate(
        &self,
        generation: u32,
        index: usize,
        member: &Member,
        fitness: &Fitness,
        fate: Fate,
    ) -> Result<(), EvolveError> {
        let (event_type, payload) = match fate {
            Fate::Died => (
                EvolutionaryEventType::Death,
                json!({
                    "reason": "fitness_below_threshold",
                    "fitness": fitness.overall,
                    "threshold": self.settings.threshold,
                }),
            ),
            Fate::Survived => {
                (EvolutionaryEventType::Survival, json!({ "fitness": fitness.overall }))
            }
        };
        let event = self.event(member, generation, index, event_type, payload, Some(fitness));
        let key = EventKey { generation, phase: EventKey::FATE, index: index as u32, seq: 0 };
        self.recorder.record(key, &event).await?;
        Ok(())
    }
}

/// What an evolution has found so far, carried from one generation to the next.
#[derive(Default)]
struct Tally {
    /// Each genome's fitness, from its first evaluation.
    scores: BTreeMap<GenomeId, Fitness>,
    /// The best genome so far and its fitness.
    best: Option<(Genome, Fitness)>,
    /// Each generation's figures.
    reports: Vec<GenerationReport>,
    /// Evaluations run.
    evaluated: usize,
    /// Evaluations reused.
    reused: usize,
    /// The last generation's survivors, best first.
    parents: Vec<Genome>,
    /// Its elite.
    elite: Vec<Genome>,
}

impl Tally {
    /// Keeps `fit` as `member`'s score (if it has none) and as the best if it is (on a tie,
    /// the smaller genome id wins).
    fn score(&mut self, member: &Member, fit: &Fitness) {
        self.scores.entry(member.genome.id.clone()).or_insert_with(|| fit.clone());
        let better = self.best.as_ref().is_none_or(|(g, b)| {
            fit.overall > b.overall || (fit.overall == b.overall && member.genome.id < g.id)
        });
        if better {
            self.best = Some((member.genome.clone(), fit.clone()));
        }
    }
}

/// The figures of a generation whose members scored `fitness` and met `fates`.
fn generation_report(generation: u32, fitness: &[Fitness], fates: &[Fate]) -> GenerationReport {
    let overall: Vec<f64> = fitness.iter().map(|f| f.overall).collect();
    GenerationReport {
        generation,
        members: fitness.len(),
        best: overall.iter().copied().fold(0.0, f64::max),
        mean: overall.iter().sum::<f64>() / overall.len().max(1) as f64,
        survived: fates.iter().filter(|f| **f == Fate::Survived).count(),
        died: fates.iter().filter(|f| **f == Fate::Died).count(),
    }
}

/// Whether `space` has a prompt gene only a reasoner can move (no variants of its own).
pub fn needs_writer(space: &SearchSpace) -> bool {
    space.genes.iter().any(|g| {
        matches!(&g.kind, GeneKind::Prompt { variants, from_reasoner: true } if variants.is_empty())
    })
}

/// What makes an evolution this one, of its settings as JSON: all but how many evaluations
/// run at once (which changes how long it takes, not what it finds).
fn identity(mut settings: Value) -> Value {
    if let Value::Object(map) = &mut settings {
        map.remove("concurrency");
    }
    settings
}

/// The agent id an evolution's events carry for a member.
pub fn agent_id(generation: u32, index: usize) -> String {
    format!("evolution/{generation}/{index}")
}

/// The fitness metrics of an event: the scores and `overall_fitness`.
fn metrics(fitness: &Fitness) -> BTreeMap<String, f64> {
    let mut out = fitness.scores.clone();
    out.insert("overall_fitness".into(), fitness.overall);
    out
}

/// The fitness an evaluation event recorded.
fn fitness_of(event: &EvolutionaryEvent) -> Fitness {
    let mut scores = event.fitness_metrics.clone().unwrap_or_default();
    let overall = scores.remove("overall_fitness").unwrap_or(0.0);
    let failure = event.payload.get("failure").and_then(Value::as_str).map(str::to_owned);
    Fitness { overall, scores, failure }
}

/// The member a recorded spawn describes, if it can be read.
fn recorded_member(event: &EvolutionaryEvent) -> Option<Member> {
    let genome: Genome = serde_json::from_value(event.payload.get("genome")?.clone()).ok()?;
    if genome.verify().is_err() || genome.id != event.genome_id {
        return None;
    }
    let elite = event.payload.get("elite").and_then(Value::as_bool).unwrap_or(false);
    let mutations =
        serde_json::from_value(event.payload.get("mutations").cloned().unwrap_or_default())
            .unwrap_or_default();
    Some(Member { genome, mutations, elite })
}
