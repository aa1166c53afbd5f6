//! A durable evolution (`strata evolve`): started from an evolution file or resumed, its
//! genomes evaluated on a task suite through the library ([`TeamFileServices`]: the sandbox,
//! per-agent network rule and reasoners of `strata run`), its state in `evolution.json`, its
//! flight recorder in its run store, its family tree read back ([`lineage`]).
//!
//! An evolution's directory in the data directory holds `evolution.json` (what it is and how
//! it stands: [`EvolutionInfo`]), `evolution.toml` (the file it was started with),
//! `genesis.json` (its first genome, code included, so that a resume needs nothing outside
//! the directory but the suite), `best-genome.json` once it has ended, and the run store whose
//! `evolution_events` tree is the flight recorder.
//!
//! ```no_run
//! # async fn evolve() -> strata::Result<()> {
//! use std::path::Path;
//!
//! use strata::evolve::{EvolveOptions, Evolving};
//!
//! let options = EvolveOptions::new(".strata/runs");
//! let ready = Evolving::start(Path::new("evolution.toml"), &options).await?.prepare(&options)?;
//! // Stopped early (as by Ctrl-C), it is resumable with `Evolving::resume`.
//! let evolved = ready.run(std::future::pending::<()>()).await?;
//! assert!(evolved.report.is_some());
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agent_evolution::{
    Evolution, EvolutionFile, EvolutionReport, Progress, SledRecorder, SuiteEvaluator, TaskSuite,
};
use agent_state::evolution::{EvolutionSettings, Genome, Lineage, LineageNode};
use agent_state::{RunId, Timestamp};
use run_store::{Durability, RunStore};
use serde::{Deserialize, Serialize};

use crate::error::{Context as _, Error, Result};
use crate::evaluation::TeamFileServices;
use crate::run::{Observer, Quiet};
use crate::run_dir::{civil_from_days, data_dir, now_ms, read_json, write_atomic};

pub use crate::run_dir::EVOLUTION_FILE;

/// The evolution file an evolution was started with, in its directory.
pub const CONFIG_FILE: &str = "evolution.toml";
/// Its genesis genome.
pub const GENESIS_FILE: &str = "genesis.json";
/// The best genome, once it has ended.
pub const BEST_FILE: &str = "best-genome.json";

/// Where an evolution stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvolutionStatus {
    /// Running, or killed while running.
    Running,
    /// Stopped (by Ctrl-C); resumable.
    Interrupted,
    /// Every generation ran.
    Finished,
    /// It stopped with an error.
    Failed,
}

/// `evolution.json`: what an evolution is and how it stands.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EvolutionInfo {
    /// Its id.
    pub run_id: RunId,
    /// The evolution file it was started from, as given.
    pub config: String,
    /// The task suite (absolute).
    pub suite: PathBuf,
    /// When it started (ms since the epoch).
    pub started_at: u64,
    /// When it ended.
    #[serde(default)]
    pub finished_at: Option<u64>,
    /// How it stands.
    pub status: EvolutionStatus,
    /// The best genome and its fitness, once it ended.
    #[serde(default)]
    pub best: Option<(String, f64)>,
    /// Why it failed.
    #[serde(default)]
    pub failure: Option<String>,
    /// Commands ran without the sandbox.
    #[serde(default)]
    pub unsandboxed: bool,
}

impl EvolutionInfo {
    /// The `evolution.json` of the evolution in `dir`.
    pub fn read(dir: &Path) -> Result<Self> {
        read_json(&dir.join(EVOLUTION_FILE))
    }

    /// Writes it into `dir`, atomically.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_atomic(&dir.join(EVOLUTION_FILE), &serde_json::to_vec_pretty(self)?)
    }

    /// The status `strata runs` shows, including an evolution killed while running (`dir` is
    /// its directory).
    pub fn effective_status(&self, dir: &Path) -> &'static str {
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

/// Finds an evolution by id in `data`, or takes `run` as its directory; bad input if neither
/// holds one.
pub fn resolve(data: &Path, run: &str) -> Result<PathBuf> {
    let by_id = data.join(run);
    let dir = if by_id.is_dir() { by_id } else { PathBuf::from(run) };
    if !dir.join(EVOLUTION_FILE).is_file() || !dir.join(run_store::RUN_MARKER).is_file() {
        return Err(Error::bad_input(format!(
            "no evolution `{run}`: it is neither an evolution id in {} nor an evolution's directory (no {EVOLUTION_FILE}); `strata runs` lists them",
            data.display()
        )));
    }
    Ok(dir)
}

/// The genome `given` names: a genome JSON file (such as an evolution's [`BEST_FILE`]), or an
/// evolution in `data` whose best genome it is; checked (its id matches its content). Bad
/// input when it is neither, or not a valid genome.
pub fn read_genome(data: &Path, given: &str) -> Result<Genome> {
    let file = Path::new(given);
    let path = if file.is_file() {
        file.to_path_buf()
    } else {
        let dir = resolve(data, given).map_err(|_| {
            Error::bad_input(format!(
                "`{}` is neither a genome file nor an evolution in {}",
                given.escape_debug(),
                data.display()
            ))
        })?;
        let best = dir.join(BEST_FILE);
        if !best.is_file() {
            return Err(Error::bad_input(format!(
                "evolution `{}` has no best genome yet (it has not finished); `strata evolve --resume {}` finishes it",
                given.escape_debug(),
                given.escape_debug()
            )));
        }
        best
    };
    let genome: Genome = read_json(&path)
        .with_context(|| format!("{} is not a genome", path.display()))
        .map_err(Error::bad_input_from)?;
    genome
        .verify()
        .map_err(|e| Error::bad_input(format!("{} is not a valid genome: {e}", path.display())))?;
    Ok(genome)
}

/// The genomes of `tree` depth first, each after its parent with its depth (0 for a root;
/// siblings by generation, then id): the family tree as `strata inspect EVO lineage` indents
/// it. A genome whose parent is not in the tree is left out.
pub fn family(tree: &Lineage) -> Vec<(&LineageNode, usize)> {
    let mut children: BTreeMap<Option<&str>, Vec<&LineageNode>> = BTreeMap::new();
    for node in tree.ordered() {
        children.entry(node.parent_id.as_ref().map(|p| p.as_str())).or_default().push(node);
    }
    let mut stack: Vec<(&LineageNode, usize)> = children
        .get(&None)
        .map(|roots| roots.iter().rev().map(|n| (*n, 0)).collect())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(tree.nodes.len());
    while let Some((node, depth)) = stack.pop() {
        out.push((node, depth));
        if let Some(kids) = children.get(&Some(node.genome_id.as_str())) {
            stack.extend(kids.iter().rev().map(|kid| (*kid, depth + 1)));
        }
    }
    out
}

/// A new evolution's id: `evo-` and the UTC time, with a random suffix.
pub fn new_id() -> RunId {
    let secs = now_ms() / 1000;
    let (y, m, d) = civil_from_days(i64::try_from(secs / 86_400).unwrap_or(0));
    let rest = secs % 86_400;
    let random = uuid::Uuid::new_v4();
    let suffix: String = random.simple().to_string().chars().take(4).collect();
    let text = format!(
        "evo-{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{suffix}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    RunId::parse(&text).unwrap_or_else(|_| RunId::hex(random.as_u128()))
}

/// The family tree of the evolution in `dir`, read from a private copy of its store.
pub fn lineage(dir: &Path) -> Result<Lineage> {
    let store = RunStore::open_read_only(dir).map_err(Error::bad_input_from)?;
    let events: Vec<_> = SledRecorder::read(&store)
        .context("cannot read the flight recorder")?
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    Ok(Lineage::from_events(&events))
}

/// How an evolution is started or resumed.
#[derive(Clone)]
pub struct EvolveOptions {
    /// The data directory (the evolution's directory is `<data>/<id>`).
    pub data: PathBuf,
    /// A new evolution's id; `None`: [`new_id`].
    pub run_id: Option<RunId>,
    /// The suite's commands run without the sandbox (recorded in `evolution.json`, and kept
    /// on resume).
    pub unsandboxed: bool,
    /// The flight recorder is not synced to disk (faster; a power loss may lose recent
    /// events).
    pub no_sync: bool,
    /// What the front end is told (its warnings).
    pub observer: Arc<dyn Observer>,
}

impl EvolveOptions {
    /// An evolution in the data directory `data`, synced, sandboxed.
    pub fn new(data: impl Into<PathBuf>) -> Self {
        Self {
            data: data.into(),
            run_id: None,
            unsandboxed: false,
            no_sync: false,
            observer: Arc::new(Quiet),
        }
    }

    fn durability(&self) -> Durability {
        if self.no_sync { Durability::NoSync } else { Durability::Synced }
    }
}

/// An evolution recorded (started, or found to resume) with its suite loaded: what
/// [`prepare`](Self::prepare) makes ready to run.
pub struct Evolving {
    dir: PathBuf,
    info: EvolutionInfo,
    file: EvolutionFile,
    genesis: Genome,
    suite: TaskSuite,
    store: RunStore,
}

impl Evolving {
    /// Starts the evolution of the evolution file `config`: the file, its suite and its
    /// genesis are checked before anything is written (bad input otherwise), then its
    /// directory is made with `evolution.json`, the file and the genesis.
    pub async fn start(config: &Path, options: &EvolveOptions) -> Result<Self> {
        let file = EvolutionFile::read(config).map_err(Error::bad_input_from)?;
        let suite = load_suite(file.suite.clone()).await?;
        let genesis = file.genesis(&suite).map_err(Error::bad_input_from)?;
        Evolution::check(&file.settings, &file.space, &genesis).map_err(Error::bad_input_from)?;
        if agent_evolution::needs_writer(&file.space) {
            return Err(Error::bad_input(format!(
                "{}: the prompt gene asks a reasoner to write variants (from_reasoner) and lists none; `strata evolve` runs suites on the rule-based reasoner, which writes none: list `variants`",
                config.display()
            )));
        }
        let data = &options.data;
        if data.exists() && !data.is_dir() {
            return Err(Error::bad_input(format!(
                "the data directory {} is a file; give --data a directory",
                data.display()
            )));
        }
        let run_id = options.run_id.clone().unwrap_or_else(new_id);
        let dir = data.join(&run_id);
        let store = match RunStore::create(&dir, &run_id, Timestamp(now_ms()), options.durability())
        {
            Ok(store) => store,
            Err(
                e @ (run_store::StoreError::AlreadyExists { .. }
                | run_store::StoreError::BadRunId { .. }),
            ) => {
                return Err(Error::bad_input_from(e));
            }
            Err(e) => {
                return Err(Error::failed_from(e)
                    .context(format!("cannot create the evolution directory {}", dir.display())));
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
            unsandboxed: options.unsandboxed,
        };
        info.write(&dir)?;
        Ok(Self { dir, info, file, genesis, suite, store })
    }

    /// Finds the evolution `run` (an id in the data directory, or a directory) to go on with
    /// from its last finished evaluation: bad input if there is none, or it has finished.
    pub async fn resume(run: &str, options: &EvolveOptions) -> Result<Self> {
        let dir = resolve(&options.data, run)?;
        let info = EvolutionInfo::read(&dir).map_err(Error::bad_input_from)?;
        if info.status == EvolutionStatus::Finished {
            return Err(Error::bad_input(format!(
                "evolution {} has finished; start a new one with `strata evolve CONFIG`",
                info.run_id
            )));
        }
        let config = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&config)
            .with_context(|| format!("cannot read {}", config.display()))
            .map_err(Error::bad_input_from)?;
        let mut file = EvolutionFile::parse(&config, &text).map_err(Error::bad_input_from)?;
        file.suite.clone_from(&info.suite);
        let genesis: Genome = read_json(&dir.join(GENESIS_FILE)).map_err(Error::bad_input_from)?;
        let store = RunStore::open(&dir, options.durability()).map_err(Error::bad_input_from)?;
        let suite = load_suite(file.suite.clone()).await?;
        Ok(Self { dir, info, file, genesis, suite, store })
    }

    /// What `evolution.json` says.
    pub fn info(&self) -> &EvolutionInfo {
        &self.info
    }

    /// The evolution's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The evolution ready to run: its evaluator on the suite's team file's services
    /// ([`TeamFileServices`]: its sandbox, checked to work here (else bad input), hiding the
    /// data directory; none when the evolution or `options` say unsandboxed, which is
    /// recorded and warned of), its flight recorder on its store.
    pub fn prepare(self, options: &EvolveOptions) -> Result<Ready> {
        let Evolving { dir, mut info, file, genesis, suite, store } = self;
        let unsandboxed = options.unsandboxed || info.unsandboxed;
        if unsandboxed {
            if !info.unsandboxed {
                info.unsandboxed = true;
                info.write(&dir)?;
            }
            options
                .observer
                .warn("warning: --unsandboxed: the suite's commands run without a sandbox");
        }
        let services = TeamFileServices::new(&suite.team, unsandboxed)
            .map_err(|e| Error::bad_input(format!("cannot sandbox the suite's commands: {e}")))?
            .hiding(data_dir(&options.data))
            .hiding(data_dir(&dir));
        let tasks = suite.tasks.len();
        let evaluator = SuiteEvaluator::with_services(suite, Arc::new(services))
            .with_weights(file.settings.weights);
        let recorder = SledRecorder::open(&store).map_err(Error::failed_from)?;
        let evolution = Evolution::new(
            file.settings.clone(),
            file.space,
            genesis,
            Arc::new(evaluator),
            Arc::new(recorder),
            Arc::new(agent_core::TokioClock::new()),
        )
        .map_err(Error::bad_input_from)?;
        Ok(Ready { dir, info, settings: file.settings, tasks, evolution, store })
    }
}

/// Loads and checks the suite in `dir` (its files are read on a blocking thread): a suite
/// that cannot be used is bad input. Its team must be on the rule-based reasoner: an
/// evolution scores many genomes on every task, and runs no pre-run check of a model's key
/// and server (`strata eval` runs a suite with any reasoner, checked as `strata run` checks).
async fn load_suite(dir: PathBuf) -> Result<TaskSuite> {
    let suite = tokio::task::spawn_blocking(move || TaskSuite::load(&dir))
        .await
        .context("loading the suite failed")?
        .map_err(Error::bad_input_from)?;
    suite.require_rule_based().map_err(Error::bad_input_from)?;
    Ok(suite)
}

/// An evolution ready to run ([`Evolving::prepare`]).
pub struct Ready {
    dir: PathBuf,
    info: EvolutionInfo,
    settings: EvolutionSettings,
    tasks: usize,
    evolution: Evolution,
    /// Open while it runs.
    store: RunStore,
}

impl Ready {
    /// What `evolution.json` says.
    pub fn info(&self) -> &EvolutionInfo {
        &self.info
    }

    /// The evolution's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its settings (generations, population, seed...).
    pub fn settings(&self) -> &EvolutionSettings {
        &self.settings
    }

    /// How many tasks its suite has.
    pub fn tasks(&self) -> usize {
        self.tasks
    }

    /// The same evolution calling `progress` with each generation's figures as it goes.
    #[must_use]
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.evolution = self.evolution.with_progress(progress);
        self
    }

    /// Runs every generation left, or until `stop` completes (then it is interrupted and
    /// resumable: every finished evaluation is recorded). `evolution.json` records the end;
    /// a finished evolution's best genome is written into `best-genome.json`. An evolution
    /// that fails is recorded as failed and its error returned.
    pub async fn run(self, stop: impl Future<Output = ()>) -> Result<Evolved> {
        let Ready { dir, mut info, evolution, store, .. } = self;
        let result = tokio::select! {
            result = evolution.run() => Some(result),
            () = stop => None,
        };
        info.finished_at = Some(now_ms());
        let report = match result {
            None => {
                info.status = EvolutionStatus::Interrupted;
                info.write(&dir)?;
                return Ok(Evolved { info, dir, report: None });
            }
            Some(Err(e)) => {
                info.status = EvolutionStatus::Failed;
                info.failure = Some(e.to_string());
                info.write(&dir)?;
                return Err(Error::failed_from(e).context("the evolution failed"));
            }
            Some(Ok(report)) => report,
        };
        info.status = EvolutionStatus::Finished;
        info.best = Some((report.best.id.to_string(), report.best_fitness.overall));
        write_atomic(&dir.join(BEST_FILE), &serde_json::to_vec_pretty(&report.best)?)?;
        info.write(&dir)?;
        drop(store);
        Ok(Evolved { info, dir, report: Some(report) })
    }
}

/// How an evolution's run ended.
#[derive(Debug)]
pub struct Evolved {
    /// `evolution.json` as it ended.
    pub info: EvolutionInfo,
    /// The evolution's directory.
    pub dir: PathBuf,
    /// What it found; `None`: it was interrupted (resumable).
    pub report: Option<EvolutionReport>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use agent_state::evolution::GenomeId;

    use super::*;

    #[test]
    fn a_new_id_is_evo_and_the_time() {
        let id = new_id();
        assert!(id.starts_with("evo-"), "{id}");
        assert_eq!(id.len(), "evo-20261206-101500-ab12".len(), "{id}");
        assert!(agent_state::RunId::parse(&id).is_ok(), "{id}");
    }

    fn node(id: char, parent: Option<char>, generation: u32) -> LineageNode {
        let id_of = |c: char| GenomeId::parse(&c.to_string().repeat(64)).unwrap();
        LineageNode {
            genome_id: id_of(id),
            parent_id: parent.map(id_of),
            generation,
            fitness: None,
            fate: None,
            mutations: Vec::new(),
            adopted: false,
        }
    }

    /// Each genome comes after its parent, one deeper; siblings by generation, then id; a
    /// genome whose parent is not in the tree is left out.
    #[test]
    fn a_family_is_walked_depth_first_under_each_parent() {
        let nodes = [
            node('a', None, 0),
            node('c', Some('a'), 1),
            node('b', Some('a'), 1),
            node('d', Some('b'), 2),
            node('e', Some('a'), 2),
            node('f', Some('9'), 3),
        ];
        let tree = Lineage {
            nodes: nodes.into_iter().map(|n| (n.genome_id.clone(), n)).collect(),
            ..Lineage::default()
        };
        let walked: Vec<(char, usize)> = family(&tree)
            .into_iter()
            .map(|(n, depth)| (n.genome_id.as_str().chars().next().unwrap(), depth))
            .collect();
        assert_eq!(walked, [('a', 0), ('b', 1), ('d', 2), ('c', 1), ('e', 1)]);
    }

    #[test]
    fn a_genome_is_a_file_or_a_finished_evolutions_best() {
        let data = tempfile::tempdir().unwrap();
        let err = read_genome(data.path(), "nope").unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().contains("neither a genome file nor an evolution"), "{err}");
        let file = data.path().join("g.json");
        std::fs::write(&file, "{}").unwrap();
        let err = read_genome(data.path(), file.to_str().unwrap()).unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().ends_with("g.json is not a genome"), "{err}");
    }

    #[test]
    fn only_a_directory_holding_an_evolution_resolves() {
        let data = tempfile::tempdir().unwrap();
        let err = resolve(data.path(), "nope").unwrap_err();
        assert!(err.is_bad_input());
        assert!(err.to_string().contains("no evolution `nope`"), "{err}");
    }
}
