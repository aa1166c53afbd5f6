//! The evolution file `strata evolve` reads: the suite, the settings, the genesis and the
//! genes, in TOML.
//!
//! ```toml
//! suite = "suite"            # the task suite folder, relative to this file (required)
//!
//! [evolution]                # required
//! population = 4             # genomes per generation, 1 to 10000 (required)
//! generations = 3            # generations after the genesis, 1 to 100000 (required)
//! seed = 42                  # every random choice comes from it (required)
//! threshold = 0.5            # below this overall fitness a genome dies (default 0.5)
//! elitism = 1                # best survivors carried over unchanged (default 1)
//! mutations = 1              # mutations per child, 1 to 16 (default 1)
//! concurrency = 2            # evaluations at once, 1 to 256 (default 2)
//! weights = { success = 0.4, efficiency = 0.3, safety = 0.3 }   # the default
//!
//! [genesis]                  # the first genome; what is left out comes from the suite
//!                            # team's first executor (and its tool limit for
//!                            # strategy.tool_timeout_ms)
//! role = "executor"
//! prompt = ""
//! model = "some-model"
//! temperature = 0.7
//! tools = ["shell"]          # among the suite's executors' tools (its permissions)
//! max_retries = 0
//! timeout_ms = 30000
//! strategy = { tool_timeout_ms = 5000 }
//! code = { "notes.md" = "genesis/notes.md" }   # workspace path = file (relative to this file)
//!
//! [[genes]]                  # what may vary, within bounds
//! target = "max_retries"     # max_retries, timeout_ms, temperature, role, model, prompt,
//!                            # tools, or strategy.NAME
//! kind = "int"               # int {min, max, step = 1}, float {min, max, step},
//! min = 0                    # choice {values}, prompt {variants, from_reasoner},
//! max = 5                    # tools {min = 1}
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use agent_state::evolution::{
    EvolutionError, EvolutionSettings, Gene, Genome, GenomeConfig, SearchSpace,
};
use serde::Deserialize;
use serde_json::Value;

use crate::suite::TaskSuite;

/// The largest evolution file.
const MAX_FILE_BYTES: usize = 1024 * 1024;

/// An evolution file that cannot be used; nothing was run or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// It cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// It is not valid TOML or has a wrong or unknown field (the parser's words, with the line).
    #[error("{}: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where.
        message: String,
    },
    /// A value breaks a rule.
    #[error("{}: {source}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The field and the rule.
        source: EvolutionError,
    },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    suite: String,
    evolution: EvolutionSettings,
    #[serde(default)]
    genesis: RawGenesis,
    #[serde(default)]
    genes: Vec<Gene>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGenesis {
    role: Option<String>,
    prompt: Option<String>,
    model: Option<String>,
    temperature: Option<f64>,
    tools: Option<Vec<String>>,
    max_retries: Option<u32>,
    timeout_ms: Option<u64>,
    strategy: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    code: BTreeMap<String, String>,
}

/// A parsed evolution file.
#[derive(Debug)]
pub struct EvolutionFile {
    /// The file.
    pub path: PathBuf,
    /// The suite folder (resolved against the file's folder).
    pub suite: PathBuf,
    /// The settings, checked.
    pub settings: EvolutionSettings,
    /// The genes, checked.
    pub space: SearchSpace,
    genesis: RawGenesis,
}

impl EvolutionFile {
    /// Reads and checks `path`.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = team_file::read(path, MAX_FILE_BYTES).map_err(|e| match e {
            team_file::ReadError::Io { path, source } => ConfigError::Io { path, source },
            team_file::ReadError::File(e) => {
                ConfigError::Syntax { path: path.to_path_buf(), message: e.to_string() }
            }
        })?;
        Self::parse(path, &text)
    }

    /// Parses and checks `text`, read from `path` (which names it in errors and anchors the
    /// relative paths).
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        let raw: Raw = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            message: e.to_string().trim().replace('\n', " "),
        })?;
        let invalid = |source| ConfigError::Invalid { path: path.to_path_buf(), source };
        raw.evolution.validate().map_err(invalid)?;
        let space = SearchSpace::new(raw.genes);
        space.validate().map_err(invalid)?;
        let base = path.parent().unwrap_or(Path::new("."));
        Ok(Self {
            path: path.to_path_buf(),
            suite: base.join(&raw.suite),
            settings: raw.evolution,
            space,
            genesis: raw.genesis,
        })
    }

    /// The genesis genome: the `[genesis]` table over the suite team's first executor, with the
    /// suite's executors' tools as its permissions and its code files read.
    pub fn genesis(&self, suite: &TaskSuite) -> Result<Genome, ConfigError> {
        let g = &self.genesis;
        let mut config: GenomeConfig = suite.executor_config();
        if let Some(v) = &g.role {
            config.role.clone_from(v);
        }
        if let Some(v) = &g.prompt {
            config.prompt.clone_from(v);
        }
        if g.model.is_some() {
            config.model.clone_from(&g.model);
        }
        if g.temperature.is_some() {
            config.temperature = g.temperature;
        }
        if let Some(v) = &g.tools {
            config.tools.clone_from(v);
        }
        if let Some(v) = g.max_retries {
            config.max_retries = v;
        }
        if let Some(v) = g.timeout_ms {
            config.timeout_ms = v;
        }
        if let Some(strategy) = &g.strategy {
            config.strategy.extend(strategy.clone());
        }
        let base = self.path.parent().unwrap_or(Path::new("."));
        let mut code = BTreeMap::new();
        for (target, source) in &g.code {
            let file = base.join(source);
            let text = team_file::read(&file, agent_state::evolution::MAX_GENOME_CODE_BYTES)
                .map_err(|e| match e {
                    team_file::ReadError::Io { path, source } => ConfigError::Io { path, source },
                    team_file::ReadError::File(e) => {
                        ConfigError::Syntax { path: file.clone(), message: e.to_string() }
                    }
                })?;
            code.insert(target.clone(), text);
        }
        Genome::genesis_with_code(config, code, suite.permissions())
            .map_err(|source| ConfigError::Invalid { path: self.path.clone(), source })
    }
}
