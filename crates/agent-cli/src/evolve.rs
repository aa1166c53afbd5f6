//! `strata evolve` (an evolution from an evolution file, durable, resumable), `strata lineage`
//! (its family tree as JSON, DOT or Mermaid) and `strata inspect RUN lineage`.
//!
//! An evolution's directory in the data directory holds `evolution.json` (what it is and how it
//! stands), `evolution.toml` (the file it was started with), `genesis.json` (its first genome,
//! code included, so that a resume needs nothing outside the directory but the suite),
//! `best-genome.json` once it has ended, and the run store whose `evolution_events` tree is the
//! flight recorder.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_evolution::{
    Evolution, EvolutionFile, EvolutionReport, SledRecorder, SuiteEvaluator, TaskSuite,
};
use agent_state::Timestamp;
use agent_state::evolution::{Genome, Lineage};
use anyhow::Context;
use run_store::{Durability, RunStore};
use serde::{Deserialize, Serialize};

use crate::cli::{EvolveArgs, LineageArgs, LineageFormat};
use crate::{Failure, INTERRUPTED, bad_input};
use strata::run_dir::{now_ms, read_json, write_atomic};

/// What an evolution directory is: `evolution.json`.
pub(crate) use strata::run_dir::EVOLUTION_FILE;
/// The evolution file it was started with.
const CONFIG_FILE: &str = "evolution.toml";
/// Its genesis genome.
const GENESIS_FILE: &str = "genesis.json";
/// The best genome, once it has ended.
pub(crate) const BEST_FILE: &str = "best-genome.json";

/// Where an evolution stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum EvolutionStatus {
    /// Running, or killed while running.
    Running,
    /// Stopped by Ctrl-C; resumable.
    Interrupted,
    /// Every generation ran.
    Finished,
    /// It stopped with an error.
    Failed,
}

/// `evolution.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct EvolutionInfo {
    /// Its id.
    pub(crate) run_id: String,
    /// The evolution file it was started from, as given.
    pub(crate) config: String,
    /// The task suite (absolute).
    pub(crate) suite: PathBuf,
    /// When it started (ms since the epoch).
    pub(crate) started_at: u64,
    /// When it ended.
    #[serde(default)]
    pub(crate) finished_at: Option<u64>,
    /// How it stands.
    pub(crate) status: EvolutionStatus,
    /// The best genome and its fitness, once it ended.
    #[serde(default)]
    pub(crate) best: Option<(String, f64)>,
    /// Why it failed.
    #[serde(default)]
    pub(crate) failure: Option<String>,
    /// Commands ran without the sandbox.
    #[serde(default)]
    pub(crate) unsandboxed: bool,
}

impl EvolutionInfo {
    pub(crate) fn read(dir: &Path) -> anyhow::Result<Self> {
        Ok(read_json(&dir.join(EVOLUTION_FILE))?)
    }

    fn write(&self, dir: &Path) -> anyhow::Result<()> {
        Ok(write_atomic(&dir.join(EVOLUTION_FILE), &serde_json::to_vec_pretty(self)?)?)
    }

    /// The status `strata runs` shows, including an evolution killed while running.
    pub(crate) fn effective_status(&self, dir: &Path) -> &'static str {
        match self.status {
            EvolutionStatus::Finished => "finished",
            EvolutionStatus::Failed => "failed",
            EvolutionStatus::Interrupted => "interrupted",
            EvolutionStatus::Running => match RunStore::is_in_use(dir) {
                Ok(true) => "running",
                _ => "killed (resumable)",
            },
        }
    }
}

/// Finds an evolution by id in `data`, or takes `run` as its directory.
pub(crate) fn resolve(data: &Path, run: &str) -> Result<PathBuf, Failure> {
    let by_id = data.join(run);
    let dir = if by_id.is_dir() { by_id } else { PathBuf::from(run) };
    if !dir.join(EVOLUTION_FILE).is_file() || !dir.join(run_store::RUN_MARKER).is_file() {
        return Err(bad_input(anyhow::anyhow!(
            "no evolution `{run}`: it is neither an evolution id in {} nor an evolution's directory (no {EVOLUTION_FILE}); `strata runs` lists them",
            data.display()
        )));
    }
    Ok(dir)
}

/// A new evolution's id: `evo-` and the time, with a random suffix.
fn new_id() -> String {
    let secs = now_ms() / 1000;
    let (y, m, d) = strata::run_dir::civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0));
    let rest = secs % 86_400;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..4];
    format!(
        "evo-{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{suffix}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// `strata evolve CONFIG` or `strata evolve --resume RUN`.
pub(crate) async fn evolve(args: EvolveArgs) -> Result<u8, Failure> {
    let (dir, info, file, genesis, store) = match (&args.config, &args.resume) {
        (_, Some(run)) => {
            let dir = resolve(&args.data, run)?;
            let info = EvolutionInfo::read(&dir).map_err(bad_input)?;
            if info.status == EvolutionStatus::Finished {
                return Err(bad_input(anyhow::anyhow!(
                    "evolution {} has finished; start a new one with `strata evolve CONFIG`",
                    info.run_id
                )));
            }
            let text = std::fs::read_to_string(dir.join(CONFIG_FILE))
                .with_context(|| format!("cannot read {}", dir.join(CONFIG_FILE).display()))
                .map_err(bad_input)?;
            let mut file =
                EvolutionFile::parse(&dir.join(CONFIG_FILE), &text).map_err(bad_input)?;
            file.suite.clone_from(&info.suite);
            let genesis: Genome = read_json(&dir.join(GENESIS_FILE)).map_err(bad_input)?;
            let durability = if args.no_sync { Durability::NoSync } else { Durability::Synced };
            let store = RunStore::open(&dir, durability).map_err(bad_input)?;
            (dir, info, file, genesis, store)
        }
        (Some(config), None) => {
            // Everything is checked before anything is written.
            let file = EvolutionFile::read(config).map_err(bad_input)?;
            let suite_dir = file.suite.clone();
            let suite = tokio::task::spawn_blocking(move || TaskSuite::load(&suite_dir))
                .await
                .context("loading the suite failed")?
                .map_err(bad_input)?;
            let genesis = file.genesis(&suite).map_err(bad_input)?;
            Evolution::check(&file.settings, &file.space, &genesis).map_err(bad_input)?;
            if agent_evolution::needs_writer(&file.space) {
                return Err(bad_input(anyhow::anyhow!(
                    "{}: the prompt gene asks a reasoner to write variants (from_reasoner) and lists none; `strata evolve` runs suites on the rule-based reasoner, which writes none: list `variants`",
                    config.display()
                )));
            }
            if args.data.exists() && !args.data.is_dir() {
                return Err(bad_input(anyhow::anyhow!(
                    "the data directory {} is a file; give --data a directory",
                    args.data.display()
                )));
            }
            let run_id = args.run_id.clone().unwrap_or_else(new_id);
            let dir = args.data.join(&run_id);
            let durability = if args.no_sync { Durability::NoSync } else { Durability::Synced };
            let store = match RunStore::create(&dir, &run_id, Timestamp(now_ms()), durability) {
                Ok(store) => store,
                Err(e @ run_store::StoreError::AlreadyExists { .. }) => return Err(bad_input(e)),
                Err(e) => {
                    return Err(Failure::Other(anyhow::Error::new(e).context(format!(
                        "cannot create the evolution directory {}",
                        dir.display()
                    ))));
                }
            };
            let text = std::fs::read_to_string(config)
                .with_context(|| format!("cannot read {}", config.display()))?;
            write_atomic(&dir.join(CONFIG_FILE), text.as_bytes())?;
            write_atomic(&dir.join(GENESIS_FILE), &serde_json::to_vec_pretty(&genesis)?)?;
            let info = EvolutionInfo {
                run_id,
                config: config.display().to_string(),
                suite: suite.dir.clone(),
                started_at: now_ms(),
                finished_at: None,
                status: EvolutionStatus::Running,
                best: None,
                failure: None,
                unsandboxed: args.unsandboxed,
            };
            info.write(&dir)?;
            (dir, info, file, genesis, store)
        }
        (None, None) => {
            return Err(bad_input(anyhow::anyhow!(
                "give an evolution file (`strata evolve FILE`) or --resume RUN"
            )));
        }
    };
    run(args, dir, info, file, genesis, store).await
}

async fn run(
    args: EvolveArgs,
    dir: PathBuf,
    mut info: EvolutionInfo,
    file: EvolutionFile,
    genesis: Genome,
    store: RunStore,
) -> Result<u8, Failure> {
    let suite_dir = file.suite.clone();
    let suite = tokio::task::spawn_blocking(move || TaskSuite::load(&suite_dir))
        .await
        .context("loading the suite failed")?
        .map_err(bad_input)?;
    let tasks = suite.tasks.len();
    let evaluator = if args.unsandboxed || info.unsandboxed {
        if !info.unsandboxed {
            info.unsandboxed = true;
            info.write(&dir)?;
        }
        errln!("warning: --unsandboxed: the suite's commands run without a sandbox");
        SuiteEvaluator::new_unsandboxed(suite)
    } else {
        SuiteEvaluator::new(suite).map_err(|e| bad_input(anyhow::anyhow!("{e}")))?
    };
    let evaluator = evaluator.with_weights(file.settings.weights);
    let recorder = SledRecorder::open(&store)?;
    let settings = file.settings.clone();
    let evolution = Evolution::new(
        file.settings.clone(),
        file.space.clone(),
        genesis,
        Arc::new(evaluator),
        Arc::new(recorder),
        Arc::new(agent_core::TokioClock::new()),
    )
    .map_err(bad_input)?;
    let evolution = if args.json {
        evolution
    } else {
        outln!(
            "evolution {}: {} generations of {} genomes on {} ({tasks} tasks), seed {}",
            info.run_id,
            settings.generations,
            settings.population,
            info.suite.display(),
            settings.seed
        );
        outln!(
            "{:>4} {:>8} {:>7} {:>7} {:>9} {:>5}",
            "gen",
            "members",
            "best",
            "mean",
            "survived",
            "died"
        );
        evolution.with_progress(Arc::new(|g: &agent_evolution::GenerationReport| {
            outln!(
                "{:>4} {:>8} {:>7.3} {:>7.3} {:>9} {:>5}",
                g.generation,
                g.members,
                g.best,
                g.mean,
                g.survived,
                g.died
            );
        }))
    };
    let result = tokio::select! {
        result = evolution.run() => Some(result),
        _ = tokio::signal::ctrl_c() => None,
    };
    info.finished_at = Some(now_ms());
    let report = match result {
        None => {
            info.status = EvolutionStatus::Interrupted;
            info.write(&dir)?;
            errln!(
                "interrupted; every finished evaluation is recorded: `strata evolve --resume {}` goes on",
                info.run_id
            );
            return Ok(INTERRUPTED);
        }
        Some(Err(e)) => {
            info.status = EvolutionStatus::Failed;
            info.failure = Some(e.to_string());
            info.write(&dir)?;
            return Err(Failure::Other(anyhow::Error::new(e).context("the evolution failed")));
        }
        Some(Ok(report)) => report,
    };
    info.status = EvolutionStatus::Finished;
    info.best = Some((report.best.id.to_string(), report.best_fitness.overall));
    write_atomic(&dir.join(BEST_FILE), &serde_json::to_vec_pretty(&report.best)?)?;
    info.write(&dir)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report, &info, &dir);
    }
    Ok(0)
}

/// What an evolution found (its generations were printed as they ran).
fn print_report(report: &EvolutionReport, info: &EvolutionInfo, dir: &Path) {
    let best = &report.best;
    outln!(
        "best genome {} (generation {}): fitness {:.3}",
        best.id.short(),
        best.generation,
        report.best_fitness.overall
    );
    outln!("  {}", genome_line(best));
    let scores: Vec<String> = report
        .best_fitness
        .scores
        .iter()
        .map(|(k, v)| format!("{k} {}", short_number(*v)))
        .collect();
    outln!("  {}", scores.join(", "));
    outln!(
        "{} evaluations run, {} reused; data in {}",
        report.evaluated,
        report.reused,
        dir.display()
    );
    outln!(
        "its family tree: strata lineage {} --format dot (or json, mermaid); strata inspect {} lineage",
        info.run_id,
        info.run_id
    );
}

fn short_number(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v:.3}") }
}

/// A genome's settings in one line.
fn genome_line(genome: &Genome) -> String {
    let c = &genome.config;
    let mut parts = vec![
        format!("max_retries = {}", c.max_retries),
        format!("timeout_ms = {}", c.timeout_ms),
        format!("tools = {}", c.tools.join(", ")),
    ];
    for (k, v) in &c.strategy {
        parts.push(format!("strategy.{k} = {v}"));
    }
    if let Some(m) = &c.model {
        parts.push(format!("model = {m}"));
    }
    if let Some(t) = c.temperature {
        parts.push(format!("temperature = {t}"));
    }
    if !c.prompt.is_empty() {
        parts.push(format!("prompt = {:?}", c.prompt.chars().take(40).collect::<String>()));
    }
    parts.join(", ")
}

/// The family tree of the evolution in `dir`, read from a private copy of its store.
fn lineage_of(dir: &Path) -> Result<Lineage, Failure> {
    let store = RunStore::open_read_only(dir).map_err(bad_input)?;
    let events: Vec<_> = SledRecorder::read(&store)
        .context("cannot read the flight recorder")?
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    Ok(Lineage::from_events(&events))
}

/// `strata lineage RUN --format json|dot|mermaid`.
pub(crate) async fn lineage(args: &LineageArgs) -> Result<u8, Failure> {
    let dir = resolve(&args.data, &args.run)?;
    let tree = lineage_of(&dir)?;
    match args.format {
        LineageFormat::Json => outln!("{}", serde_json::to_string_pretty(&tree.to_json())?),
        LineageFormat::Dot => out!("{}", tree.to_dot()),
        LineageFormat::Mermaid => out!("{}", tree.to_mermaid()),
    }
    Ok(0)
}

/// `strata inspect RUN lineage`: the family tree as an indented table.
pub(crate) async fn inspect(data: &Path, run: &str, json: bool) -> Result<(), Failure> {
    let dir = resolve(data, run)?;
    let info = EvolutionInfo::read(&dir).map_err(bad_input)?;
    let tree = lineage_of(&dir)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&tree.to_json())?);
        return Ok(());
    }
    outln!(
        "evolution {} ({}): {} genomes, {} events",
        info.run_id,
        info.effective_status(&dir),
        tree.nodes.len(),
        tree.events
    );
    let mut children: std::collections::BTreeMap<
        Option<&str>,
        Vec<&agent_state::evolution::LineageNode>,
    > = std::collections::BTreeMap::new();
    for node in tree.ordered() {
        children.entry(node.parent_id.as_ref().map(|p| p.as_str())).or_default().push(node);
    }
    let best = tree.best.as_ref().map(|(id, _)| id.as_str());
    let mut stack: Vec<(&agent_state::evolution::LineageNode, usize)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|n| (*n, 0)).collect())
        .unwrap_or_default();
    while let Some((node, depth)) = stack.pop() {
        let fitness = node.fitness.map_or("  -  ".to_owned(), |f| format!("{f:.3}"));
        let fate = match node.fate {
            Some(agent_state::evolution::Fate::Died) => "died",
            Some(agent_state::evolution::Fate::Survived) => "survived",
            None => "",
        };
        let marks = format!(
            "{}{}",
            if Some(node.genome_id.as_str()) == best { " BEST" } else { "" },
            if node.adopted { " ADOPTED" } else { "" }
        );
        outln!(
            "{}{} gen {} fitness {fitness} {fate}{marks}  {}",
            "  ".repeat(depth),
            node.genome_id.short(),
            node.generation,
            node.mutations.join("; ")
        );
        if let Some(kids) = children.get(&Some(node.genome_id.as_str())) {
            for kid in kids.iter().rev() {
                stack.push((kid, depth + 1));
            }
        }
    }
    Ok(())
}
