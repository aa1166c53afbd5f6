//! The evolutionary core (docs/concepts.md#evolution), as plain data and pure rules: genomes and
//! their ids, mutation (a [`Modification`] applied to a parent within a declared search space),
//! fitness and its default weighting, selection (death below a threshold, survival, elitism), the
//! flight recorder's [`EvolutionaryEvent`]s, and the family tree they rebuild ([`Lineage`]),
//! exported as JSON, Graphviz DOT or Mermaid.
//!
//! Nothing here evaluates a genome, stores an event or reads a clock: `agent-evolution` does.
//! Randomness is a [`SeededRng`] the caller creates from a seed, so a whole evolution is a
//! function of its seed and its fitness results.
//!
//! ```
//! use agent_state::evolution::{Genome, GenomeConfig, Gene, SearchSpace, SeededRng};
//!
//! let mut config = GenomeConfig::new("executor");
//! config.max_retries = 1;
//! config.tools = vec!["shell".into(), "write_file".into()];
//! let genesis = Genome::genesis(config, vec!["shell".into(), "write_file".into()])?;
//! let space = SearchSpace::new(vec![Gene::int("max_retries", 0, 5)]);
//! let mut rng = SeededRng::new(7);
//! let change = space.mutation(&genesis, &mut rng)?;
//! let child = genesis.spawn(&change, &space)?;
//! assert_eq!(child.parent_id.as_ref(), Some(&genesis.id));
//! assert_eq!(child.generation, 1);
//! assert_ne!(child.id, genesis.id);
//! assert!(child.config.max_retries <= 5);
//! # Ok::<(), agent_state::evolution::EvolutionError>(())
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::ooda::{Modification, ModificationType, SafetyLevel, apply_code_change};
use crate::{Timestamp, Versioned, canonical_json, sha256_hex};

/// The default death threshold: a genome whose overall fitness is below it dies.
pub const DEFAULT_THRESHOLD: f64 = 0.5;

/// The most genomes one generation may hold.
pub const MAX_POPULATION: u32 = 10_000;

/// The most generations one evolution may run.
pub const MAX_GENERATIONS: u32 = 100_000;

/// The most bytes of code one genome may carry.
pub const MAX_GENOME_CODE_BYTES: usize = 1024 * 1024;

/// A small, fast, seeded pseudo-random generator (SplitMix64). The same seed gives the same
/// numbers on every machine; it is not for secrets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeededRng {
    state: u64,
}

impl SeededRng {
    /// A generator starting from `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator for one part of an evolution: `seed` mixed with `stream` (such as a
    /// generation number), so each part draws its own numbers whatever ran before it.
    pub fn derive(seed: u64, stream: u64) -> Self {
        let mut mixer = SeededRng::new(seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F));
        Self { state: mixer.next_u64() }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift: unbiased enough for choosing among a few options.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// An index into a slice of `len` items (0 when it is empty).
    pub fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).unwrap_or(0)
    }
}

/// A genome's id: the SHA-256 of its canonical serialisation, as 64 lowercase hex digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GenomeId(String);

impl GenomeId {
    /// Reads an id: 64 hex digits (any case).
    pub fn parse(text: &str) -> Result<Self, EvolutionError> {
        if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(Self(text.to_ascii_lowercase()))
        } else {
            Err(EvolutionError::Field {
                field: "genome_id".into(),
                reason: format!("`{text}` is not a genome id (64 hex digits)"),
            })
        }
    }

    /// The hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 digits, for people.
    pub fn short(&self) -> &str {
        &self.0[..self.0.len().min(12)]
    }
}

impl fmt::Display for GenomeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The evolvable part of an agent's configuration: what a genome is made of besides its code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenomeConfig {
    /// Its role, such as `executor` (the words of its system prompt).
    pub role: String,
    /// Extra instructions for its reasoner.
    #[serde(default)]
    pub prompt: String,
    /// The model, when its reasoner is a model.
    #[serde(default)]
    pub model: Option<String>,
    /// Sampling temperature for a model, 0.0 to 2.0.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// The tools it uses: at most its [`Genome::permissions`].
    #[serde(default)]
    pub tools: Vec<String>,
    /// Retries of a failed turn before it fails (the agents' default 3).
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// One turn's time limit, in milliseconds (the agents' default 30 000).
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
    /// Strategy parameters: anything else the agent's behaviour reads, by name.
    #[serde(default)]
    pub strategy: BTreeMap<String, Value>,
}

const fn default_retries() -> u32 {
    crate::DEFAULT_MAX_RETRIES
}
const fn default_timeout() -> u64 {
    crate::DEFAULT_TIMEOUT_MS
}

/// The fields of [`GenomeConfig`] a `config` modification may target.
pub const CONFIG_FIELDS: [&str; 5] = ["role", "model", "temperature", "max_retries", "timeout_ms"];

impl GenomeConfig {
    /// A configuration with `role` and the runtime's defaults (3 retries, 30 s turns).
    pub fn new(role: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            prompt: String::new(),
            model: None,
            temperature: None,
            tools: Vec::new(),
            max_retries: crate::DEFAULT_MAX_RETRIES,
            timeout_ms: crate::DEFAULT_TIMEOUT_MS,
            strategy: BTreeMap::new(),
        }
    }

    /// Checks every rule and names the first field that breaks one.
    pub fn validate(&self) -> Result<(), EvolutionError> {
        let bad =
            |field: &str, reason: String| EvolutionError::Field { field: field.into(), reason };
        if self.role.trim().is_empty() {
            return Err(bad("role", "must not be empty".into()));
        }
        if let Some((at, c)) = crate::find_control(&self.role) {
            return Err(bad("role", format!("holds the control character {c:?} at {at}")));
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Err(bad("temperature", format!("is {t}; it must be 0.0 to 2.0")));
        }
        if !(1..=crate::MAX_LIMIT_MS).contains(&self.timeout_ms) {
            return Err(bad(
                "timeout_ms",
                format!("is {}; it must be 1 to {}", self.timeout_ms, crate::MAX_LIMIT_MS),
            ));
        }
        if self.max_retries > 100 {
            return Err(bad(
                "max_retries",
                format!("is {}; it must be 0 to 100", self.max_retries),
            ));
        }
        for (i, tool) in self.tools.iter().enumerate() {
            if tool.is_empty() || !tool.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(bad("tools", format!("`{tool}` is not a tool name")));
            }
            if self.tools[..i].contains(tool) {
                return Err(bad("tools", format!("lists `{tool}` twice")));
            }
        }
        for (key, value) in &self.strategy {
            if key.trim().is_empty() {
                return Err(bad("strategy", "has an empty parameter name".into()));
            }
            if let Some(f) = value.as_f64()
                && !f.is_finite()
            {
                return Err(bad(&format!("strategy.{key}"), "is not a finite number".into()));
            }
        }
        Ok(())
    }

    /// The value of a gene's target in this configuration.
    pub fn get(&self, target: &GeneTarget) -> Value {
        match target {
            GeneTarget::Field(field) => match field.as_str() {
                "role" => Value::String(self.role.clone()),
                "model" => self.model.clone().map_or(Value::Null, Value::String),
                "temperature" => self.temperature.map_or(Value::Null, Value::from),
                "max_retries" => Value::from(self.max_retries),
                "timeout_ms" => Value::from(self.timeout_ms),
                _ => Value::Null,
            },
            GeneTarget::Strategy(key) => self.strategy.get(key).cloned().unwrap_or(Value::Null),
            GeneTarget::Prompt => Value::String(self.prompt.clone()),
            GeneTarget::Tools => Value::from(self.tools.clone()),
        }
    }
}

/// A genome: an agent's configuration and code at a state version, with its
/// place in the family tree. Its [`id`](Genome::id) is the SHA-256 of
/// `{"code_hash", "config", "state_version"}` serialised canonically (keys sorted, no spaces,
/// tools sorted), so it is the same on every machine and changes with any change of them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Genome {
    /// The id: see the type's docs.
    pub id: GenomeId,
    /// Its configuration.
    pub config: GenomeConfig,
    /// Its code: files (workspace-relative paths) and their text, which an evaluation or a
    /// hot-swap writes into the agent's workspace. Empty for an agent without code of its own.
    #[serde(default)]
    pub code: BTreeMap<String, String>,
    /// The SHA-256 of its code (canonical `{path: text}`), `None` without code.
    #[serde(default)]
    pub code_hash: Option<String>,
    /// Bumped by every mutation.
    pub state_version: u64,
    /// The most tools it may hold (its supervisor's grant): inherited unchanged, never widened.
    pub permissions: Vec<String>,
    /// The genome it was spawned from; `None` for a genesis.
    #[serde(default)]
    pub parent_id: Option<GenomeId>,
    /// 0 for a genesis, its parent's plus one otherwise.
    #[serde(default)]
    pub generation: u32,
    /// The ids from the genesis to this genome, itself last.
    #[serde(default)]
    pub lineage_path: Vec<GenomeId>,
}

impl Genome {
    /// A genesis (generation 0, no parent) with `config` and `permissions` (the tools it may
    /// ever hold; its `config.tools` must be among them).
    pub fn genesis(config: GenomeConfig, permissions: Vec<String>) -> Result<Self, EvolutionError> {
        Self::genesis_with_code(config, BTreeMap::new(), permissions)
    }

    /// A genesis with code files.
    pub fn genesis_with_code(
        config: GenomeConfig,
        code: BTreeMap<String, String>,
        permissions: Vec<String>,
    ) -> Result<Self, EvolutionError> {
        let mut permissions = permissions;
        permissions.sort();
        permissions.dedup();
        let mut genome = Genome {
            id: GenomeId(String::new()),
            config,
            code,
            code_hash: None,
            state_version: 1,
            permissions,
            parent_id: None,
            generation: 0,
            lineage_path: Vec::new(),
        };
        genome.normalise()?;
        genome.lineage_path = vec![genome.id.clone()];
        Ok(genome)
    }

    /// Sorts the tools, validates, and computes the code hash and the id.
    fn normalise(&mut self) -> Result<(), EvolutionError> {
        self.config.tools.sort();
        self.config.validate()?;
        if let Some(tool) = self.config.tools.iter().find(|t| !self.permissions.contains(t)) {
            return Err(EvolutionError::WidensPermissions {
                what: format!(
                    "the tool `{tool}` is not among the genome's permissions ({})",
                    self.permissions.join(", ")
                ),
            });
        }
        let size: usize = self.code.iter().map(|(p, t)| p.len() + t.len()).sum();
        if size > MAX_GENOME_CODE_BYTES {
            return Err(EvolutionError::Field {
                field: "code".into(),
                reason: format!("holds {size} bytes; at most {MAX_GENOME_CODE_BYTES}"),
            });
        }
        for path in self.code.keys() {
            check_code_path(path)?;
        }
        self.code_hash = if self.code.is_empty() {
            None
        } else {
            Some(sha256_hex(canonical_json(&serde_json::to_value(&self.code)?).as_bytes()))
        };
        self.id = genome_id(&self.config, self.code_hash.as_deref(), self.state_version)?;
        Ok(())
    }

    /// Checks that the id, code hash and lineage are what its content says (a genome read
    /// from storage or a file).
    pub fn verify(&self) -> Result<(), EvolutionError> {
        let mut copy = self.clone();
        copy.normalise()?;
        if copy.id != self.id || copy.code_hash != self.code_hash {
            return Err(EvolutionError::Field {
                field: "id".into(),
                reason: format!(
                    "is {} but the genome's content hashes to {}",
                    self.id.short(),
                    copy.id.short()
                ),
            });
        }
        if self.lineage_path.last() != Some(&self.id) {
            return Err(EvolutionError::Field {
                field: "lineage_path".into(),
                reason: "must end with the genome's own id".into(),
            });
        }
        Ok(())
    }

    /// The canonical serialisation its id is the hash of.
    pub fn canonical(&self) -> Result<String, EvolutionError> {
        canonical_genome(&self.config, self.code_hash.as_deref(), self.state_version)
    }

    /// Reproduction: a child of this genome with `mutation` applied,
    /// checked against `space`'s bounds; one state version and one generation further, its
    /// parent this genome. A change outside the bounds, to a field that does not exist or
    /// that would give it a tool beyond its permissions is refused, naming the field.
    pub fn spawn(
        &self,
        mutation: &Modification,
        space: &SearchSpace,
    ) -> Result<Genome, EvolutionError> {
        let mut child = self.clone();
        match mutation.modification_type {
            ModificationType::Config => {
                let value = change_value(mutation)?;
                let target = GeneTarget::Field(mutation.target.clone());
                space.check(&target, &value)?;
                set_field(&mut child.config, &mutation.target, value)?;
            }
            ModificationType::Behavior => {
                let value = change_value(mutation)?;
                let target = GeneTarget::Strategy(mutation.target.clone());
                space.check(&target, &value)?;
                child.config.strategy.insert(mutation.target.clone(), value);
            }
            ModificationType::Prompt => {
                if let Some(text) = mutation.change.get("text").and_then(Value::as_str) {
                    space.check(&GeneTarget::Prompt, &Value::String(text.to_owned()))?;
                    child.config.prompt = text.to_owned();
                } else if let Some(more) = mutation.change.get("append").and_then(Value::as_str) {
                    if !child.config.prompt.is_empty() {
                        child.config.prompt.push('\n');
                    }
                    child.config.prompt.push_str(more);
                } else {
                    return Err(EvolutionError::Mutation {
                        field: "prompt".into(),
                        reason: "a prompt change is {\"text\": ...} or {\"append\": ...}".into(),
                    });
                }
            }
            ModificationType::Architecture => {
                change_tools(&mut child.config.tools, mutation)?;
                space.check(&GeneTarget::Tools, &Value::from(child.config.tools.clone()))?;
            }
            ModificationType::Code => {
                check_code_path(&mutation.target)?;
                let text = child.code.get(&mutation.target).cloned().unwrap_or_default();
                let next = apply_code_change(&text, &mutation.change).map_err(|e| {
                    EvolutionError::Mutation {
                        field: mutation.target.clone(),
                        reason: e.to_string(),
                    }
                })?;
                child.code.insert(mutation.target.clone(), next);
            }
        }
        child.state_version = self.state_version + 1;
        child.parent_id = Some(self.id.clone());
        child.generation = self.generation + 1;
        child.normalise()?;
        child.lineage_path = self.lineage_path.clone();
        child.lineage_path.push(child.id.clone());
        Ok(child)
    }
}

/// An architecture change to `tools`: tools added and removed, kept sorted.
fn change_tools(tools: &mut Vec<String>, mutation: &Modification) -> Result<(), EvolutionError> {
    let names = |key: &str| -> Result<Vec<String>, EvolutionError> {
        match mutation.change.get(key) {
            None => Ok(Vec::new()),
            Some(v) => serde_json::from_value(v.clone()).map_err(|_| EvolutionError::Mutation {
                field: "tools".into(),
                reason: format!("`{key}` must be a list of tool names"),
            }),
        }
    };
    let (add, remove) = (names("add")?, names("remove")?);
    if add.is_empty() && remove.is_empty() {
        return Err(EvolutionError::Mutation {
            field: "tools".into(),
            reason: "an architecture change is {\"add\": [...]} and/or {\"remove\": [...]}".into(),
        });
    }
    tools.retain(|t| !remove.contains(t));
    for tool in add {
        if !tools.contains(&tool) {
            tools.push(tool);
        }
    }
    tools.sort();
    Ok(())
}

fn change_value(mutation: &Modification) -> Result<Value, EvolutionError> {
    mutation.change.get("value").cloned().ok_or_else(|| EvolutionError::Mutation {
        field: mutation.target.clone(),
        reason: "a config or behavior change is {\"value\": ...}".into(),
    })
}

fn set_field(config: &mut GenomeConfig, field: &str, value: Value) -> Result<(), EvolutionError> {
    let wrong = |expected: &str| EvolutionError::Mutation {
        field: field.into(),
        reason: format!("must be {expected}, not {value}"),
    };
    match field {
        "role" => config.role = value.as_str().ok_or_else(|| wrong("a string"))?.to_owned(),
        "model" => {
            config.model = match &value {
                Value::Null => None,
                Value::String(s) => Some(s.clone()),
                _ => return Err(wrong("a string or null")),
            }
        }
        "temperature" => {
            config.temperature = match &value {
                Value::Null => None,
                v => Some(v.as_f64().ok_or_else(|| wrong("a number or null"))?),
            }
        }
        "max_retries" => {
            config.max_retries = value
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| wrong("a whole number"))?;
        }
        "timeout_ms" => {
            config.timeout_ms = value.as_u64().ok_or_else(|| wrong("a whole number"))?;
        }
        other => {
            return Err(EvolutionError::Mutation {
                field: other.into(),
                reason: format!(
                    "is not an evolvable field; the fields are {} (strategy parameters are `behavior` changes, the prompt a `prompt` change, tools an `architecture` change)",
                    CONFIG_FIELDS.join(", ")
                ),
            });
        }
    }
    Ok(())
}

/// A code path must be workspace-relative and stay inside it.
fn check_code_path(path: &str) -> Result<(), EvolutionError> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.split(['/', '\\']).any(|part| part == ".." || part.is_empty())
        || crate::find_control(path).is_some();
    if bad {
        return Err(EvolutionError::Field {
            field: "code".into(),
            reason: format!("`{path}` is not a relative path inside the workspace"),
        });
    }
    Ok(())
}

/// The id of a genome with `config`, `code_hash` and `state_version`.
pub fn genome_id(
    config: &GenomeConfig,
    code_hash: Option<&str>,
    state_version: u64,
) -> Result<GenomeId, EvolutionError> {
    let canonical = canonical_genome(config, code_hash, state_version)?;
    Ok(GenomeId(sha256_hex(canonical.as_bytes())))
}

fn canonical_genome(
    config: &GenomeConfig,
    code_hash: Option<&str>,
    state_version: u64,
) -> Result<String, EvolutionError> {
    let mut config = config.clone();
    config.tools.sort();
    let doc = serde_json::json!({
        "config": serde_json::to_value(&config)?,
        "code_hash": code_hash,
        "state_version": state_version,
    });
    Ok(canonical_json(&doc))
}

/// What a gene changes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GeneTarget {
    /// A field of [`GenomeConfig`] (one of [`CONFIG_FIELDS`]).
    Field(String),
    /// A strategy parameter.
    Strategy(String),
    /// The prompt.
    Prompt,
    /// The set of tools.
    Tools,
}

impl GeneTarget {
    /// Reads a target as written in a search space: `max_retries`, `strategy.KEY`, `prompt`,
    /// `tools`.
    pub fn parse(text: &str) -> Result<Self, EvolutionError> {
        match text {
            "prompt" => Ok(GeneTarget::Prompt),
            "tools" => Ok(GeneTarget::Tools),
            field if CONFIG_FIELDS.contains(&field) => Ok(GeneTarget::Field(field.into())),
            other => match other.strip_prefix("strategy.") {
                Some(key) if !key.trim().is_empty() => Ok(GeneTarget::Strategy(key.into())),
                _ => Err(EvolutionError::Field {
                    field: "genes.target".into(),
                    reason: format!(
                        "`{other}` is not a gene target; targets are {}, prompt, tools and strategy.NAME",
                        CONFIG_FIELDS.join(", ")
                    ),
                }),
            },
        }
    }
}

impl fmt::Display for GeneTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GeneTarget::Field(field) => f.write_str(field),
            GeneTarget::Strategy(key) => write!(f, "strategy.{key}"),
            GeneTarget::Prompt => f.write_str("prompt"),
            GeneTarget::Tools => f.write_str("tools"),
        }
    }
}

impl Serialize for GeneTarget {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GeneTarget {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        GeneTarget::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// How a gene varies: its declared bounds, which every mutation of its target must respect.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GeneKind {
    /// A whole number in `min..=max`, moved by up to `step` at a time.
    Int {
        /// The least value.
        min: i64,
        /// The greatest value.
        max: i64,
        /// The largest move of one mutation (default 1).
        #[serde(default = "one_i64")]
        step: i64,
    },
    /// A number in `min..=max`, moved by up to `step` at a time.
    Float {
        /// The least value.
        min: f64,
        /// The greatest value.
        max: f64,
        /// The largest move of one mutation.
        step: f64,
    },
    /// One of a list of values.
    Choice {
        /// The values.
        values: Vec<Value>,
    },
    /// One of a list of prompts (the target is `prompt`); with `from_reasoner`, the evolution
    /// may also ask its reasoner for a new variant.
    Prompt {
        /// The prompts.
        #[serde(default)]
        variants: Vec<String>,
        /// Whether the reasoner writes variants too.
        #[serde(default)]
        from_reasoner: bool,
    },
    /// A subset of the genome's permissions (the target is `tools`) with at least `min` tools.
    Tools {
        /// The fewest tools a genome may keep.
        #[serde(default = "one_usize")]
        min: usize,
    },
}

const fn one_i64() -> i64 {
    1
}
const fn one_usize() -> usize {
    1
}

/// One gene of a search space: a target and how it varies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gene {
    /// What it changes.
    pub target: GeneTarget,
    /// How.
    #[serde(flatten)]
    pub kind: GeneKind,
}

impl Gene {
    /// A whole-number gene on a config field or `strategy.KEY`, moved by 1.
    pub fn int(target: &str, min: i64, max: i64) -> Self {
        Self {
            target: GeneTarget::parse(target).unwrap_or(GeneTarget::Strategy(target.into())),
            kind: GeneKind::Int { min, max, step: 1 },
        }
    }

    /// A gene choosing among `values`.
    pub fn choice(target: &str, values: Vec<Value>) -> Self {
        Self {
            target: GeneTarget::parse(target).unwrap_or(GeneTarget::Strategy(target.into())),
            kind: GeneKind::Choice { values },
        }
    }

    /// Checks the gene's own declaration.
    fn validate(&self) -> Result<(), EvolutionError> {
        let bad = |reason: String| EvolutionError::Field {
            field: format!("genes.{}", self.target),
            reason,
        };
        match (&self.kind, &self.target) {
            (GeneKind::Int { min, max, step }, GeneTarget::Field(_) | GeneTarget::Strategy(_)) => {
                if min > max {
                    return Err(bad(format!("min {min} is above max {max}")));
                }
                if *step < 1 {
                    return Err(bad(format!("step is {step}; it must be 1 or more")));
                }
                if matches!(&self.target, GeneTarget::Field(f) if f != "max_retries" && f != "timeout_ms")
                {
                    return Err(bad(
                        "an int gene fits max_retries, timeout_ms or a strategy parameter".into(),
                    ));
                }
                if matches!(&self.target, GeneTarget::Field(_)) && *min < 0 {
                    return Err(bad(format!("min is {min}; the field cannot be negative")));
                }
            }
            (
                GeneKind::Float { min, max, step },
                GeneTarget::Field(_) | GeneTarget::Strategy(_),
            ) => {
                if !(min.is_finite() && max.is_finite() && step.is_finite()) {
                    return Err(bad("min, max and step must be finite numbers".into()));
                }
                if min > max {
                    return Err(bad(format!("min {min} is above max {max}")));
                }
                if *step <= 0.0 {
                    return Err(bad(format!("step is {step}; it must be above 0")));
                }
                if matches!(&self.target, GeneTarget::Field(f) if f != "temperature") {
                    return Err(
                        bad("a float gene fits temperature or a strategy parameter".into()),
                    );
                }
            }
            (GeneKind::Choice { values }, GeneTarget::Field(_) | GeneTarget::Strategy(_)) => {
                if values.len() < 2 {
                    return Err(bad("a choice needs at least two values".into()));
                }
            }
            (GeneKind::Prompt { variants, from_reasoner }, GeneTarget::Prompt) => {
                if variants.is_empty() && !from_reasoner {
                    return Err(bad("give prompt variants, or from_reasoner = true".into()));
                }
            }
            (GeneKind::Tools { .. }, GeneTarget::Tools) => {}
            (kind, target) => {
                let kind = match kind {
                    GeneKind::Int { .. } => "int",
                    GeneKind::Float { .. } => "float",
                    GeneKind::Choice { .. } => "choice",
                    GeneKind::Prompt { .. } => "prompt",
                    GeneKind::Tools { .. } => "tools",
                };
                return Err(bad(format!(
                    "a `{kind}` gene cannot target `{target}` (prompt genes target prompt, tools genes target tools, the others a field or strategy.NAME)"
                )));
            }
        }
        Ok(())
    }

    /// Whether `value` is within this gene's bounds; the reason when it is not.
    fn admits(&self, value: &Value) -> Result<(), String> {
        match &self.kind {
            GeneKind::Int { min, max, .. } => match value.as_i64() {
                Some(v) if (*min..=*max).contains(&v) => Ok(()),
                Some(v) => Err(format!("{v} is outside {min}..={max}")),
                None => Err(format!("{value} is not a whole number")),
            },
            GeneKind::Float { min, max, .. } => match value.as_f64() {
                Some(v) if v.is_finite() && (*min..=*max).contains(&v) => Ok(()),
                Some(v) => Err(format!("{v} is outside {min}..={max}")),
                None => Err(format!("{value} is not a number")),
            },
            GeneKind::Choice { values } => {
                if values.contains(value) {
                    Ok(())
                } else {
                    Err(format!("{value} is not one of {}", Value::from(values.clone())))
                }
            }
            GeneKind::Prompt { variants, from_reasoner } => {
                if *from_reasoner || value.as_str().is_some_and(|v| variants.iter().any(|p| p == v))
                {
                    Ok(())
                } else {
                    Err("the prompt is not one of the declared variants".into())
                }
            }
            GeneKind::Tools { min } => {
                let tools: Vec<String> = serde_json::from_value(value.clone()).unwrap_or_default();
                // The permissions are the genome's own, checked when it is built.
                if tools.len() < *min {
                    return Err(format!("{} tools is fewer than the minimum {min}", tools.len()));
                }
                Ok(())
            }
        }
    }
}

/// The genes an evolution may vary, with their bounds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SearchSpace {
    /// The genes; at most one per target.
    pub genes: Vec<Gene>,
}

impl SearchSpace {
    /// A space of `genes`.
    pub fn new(genes: Vec<Gene>) -> Self {
        Self { genes }
    }

    /// Checks every gene, and that no target has two.
    pub fn validate(&self) -> Result<(), EvolutionError> {
        let mut seen = BTreeSet::new();
        for gene in &self.genes {
            gene.validate()?;
            if !seen.insert(gene.target.clone()) {
                return Err(EvolutionError::Field {
                    field: format!("genes.{}", gene.target),
                    reason: "is declared twice".into(),
                });
            }
        }
        Ok(())
    }

    /// The gene of `target`, if declared.
    pub fn gene(&self, target: &GeneTarget) -> Option<&Gene> {
        self.genes.iter().find(|g| &g.target == target)
    }

    /// Whether `value` for `target` is within the declared bounds (anything goes for an
    /// undeclared target, within the field's own rules).
    pub fn check(&self, target: &GeneTarget, value: &Value) -> Result<(), EvolutionError> {
        match self.gene(target) {
            Some(gene) => gene.admits(value).map_err(|reason| EvolutionError::OutOfBounds {
                field: target.to_string(),
                reason,
            }),
            None => Ok(()),
        }
    }

    /// A random mutation of `parent` within the bounds: a gene drawn from `rng`, moved
    /// (numbers by up to their step, clamped to the bounds; a choice to another value; a prompt
    /// to another variant; a tool removed or one of the permissions added back). A gene that
    /// cannot move (a one-value range) is skipped; [`EvolutionError::NothingToMutate`] when
    /// none can.
    pub fn mutation(
        &self,
        parent: &Genome,
        rng: &mut SeededRng,
    ) -> Result<Modification, EvolutionError> {
        let movable: Vec<&Gene> = self.genes.iter().filter(|g| can_move(g, parent)).collect();
        if movable.is_empty() {
            return Err(EvolutionError::NothingToMutate);
        }
        let gene = movable[rng.index(movable.len())];
        let current = parent.config.get(&gene.target);
        let level = SafetyLevel::LOW;
        let modification = |modification_type, target: String, change| Modification {
            modification_type,
            target,
            change,
            safety_level: level,
            validation_required: true,
        };
        let (kind, target) = match &gene.target {
            GeneTarget::Field(f) => (ModificationType::Config, f.clone()),
            GeneTarget::Strategy(k) => (ModificationType::Behavior, k.clone()),
            GeneTarget::Prompt => (ModificationType::Prompt, "prompt".to_owned()),
            GeneTarget::Tools => (ModificationType::Architecture, "tools".to_owned()),
        };
        let change = match &gene.kind {
            GeneKind::Int { min, max, step } => int_move(&current, *min, *max, *step, rng),
            GeneKind::Float { min, max, step } => float_move(&current, *min, *max, *step, rng),
            GeneKind::Choice { values } => {
                let others: Vec<&Value> = values.iter().filter(|v| **v != current).collect();
                serde_json::json!({ "value": others[rng.index(others.len())].clone() })
            }
            GeneKind::Prompt { variants, .. } => {
                let others: Vec<&String> =
                    variants.iter().filter(|v| Some(v.as_str()) != current.as_str()).collect();
                match others.get(rng.index(others.len())) {
                    Some(text) => serde_json::json!({ "text": text }),
                    // A gene whose variants the reasoner writes: the caller asks it for the
                    // text (see `agent-evolution`); until then the prompt stays.
                    None => serde_json::json!({ "text": current }),
                }
            }
            GeneKind::Tools { min } => {
                let held = &parent.config.tools;
                let missing: Vec<&String> =
                    parent.permissions.iter().filter(|t| !held.contains(t)).collect();
                let can_remove = held.len() > *min;
                let remove = match (can_remove, missing.is_empty()) {
                    (true, true) => true,
                    (false, _) => false,
                    (true, false) => rng.below(2) == 0,
                };
                if remove {
                    serde_json::json!({ "remove": [held[rng.index(held.len())].clone()] })
                } else {
                    serde_json::json!({ "add": [missing[rng.index(missing.len())].clone()] })
                }
            }
        };
        Ok(modification(kind, target, change))
    }
}

/// A whole-number gene's move from `current`: by one to `step`, up or down (up from `min`,
/// down from `max`), clamped to the bounds.
fn int_move(current: &Value, min: i64, max: i64, step: i64, rng: &mut SeededRng) -> Value {
    let now = current.as_i64().unwrap_or(min).clamp(min, max);
    let delta = 1 + i64::try_from(rng.below(u64::try_from(step).unwrap_or(1))).unwrap_or(0);
    let up = if now == min {
        true
    } else if now == max {
        false
    } else {
        rng.below(2) == 0
    };
    let next = if up { now.saturating_add(delta) } else { now.saturating_sub(delta) };
    serde_json::json!({ "value": next.clamp(min, max) })
}

/// A number gene's move from `current`: by one to ten tenths of `step`, rounded to a
/// millionth so that the stored value reads back exactly, clamped to the bounds.
fn float_move(current: &Value, min: f64, max: f64, step: f64, rng: &mut SeededRng) -> Value {
    let now = current.as_f64().unwrap_or(min).clamp(min, max);
    let tenths = 1 + rng.below(10);
    let delta = step * tenths as f64 / 10.0;
    let up = if now <= min {
        true
    } else if now >= max {
        false
    } else {
        rng.below(2) == 0
    };
    let next = if up { now + delta } else { now - delta };
    let next = (next.clamp(min, max) * 1e6).round() / 1e6;
    serde_json::json!({ "value": next.clamp(min, max) })
}

fn can_move(gene: &Gene, parent: &Genome) -> bool {
    match &gene.kind {
        GeneKind::Int { min, max, .. } => min < max,
        GeneKind::Float { min, max, .. } => min < max,
        GeneKind::Choice { values } => {
            let current = parent.config.get(&gene.target);
            values.iter().any(|v| *v != current)
        }
        GeneKind::Prompt { variants, from_reasoner } => {
            *from_reasoner || variants.iter().any(|v| v.as_str() != parent.config.prompt.as_str())
        }
        GeneKind::Tools { min } => {
            parent.config.tools.len() > *min
                || parent.permissions.iter().any(|t| !parent.config.tools.contains(t))
        }
    }
}

/// How the three scores make the overall fitness (by default 0.4 success, 0.3 efficiency,
/// 0.3 safety). Each weight is 0 or more and they sum to more than 0; the overall fitness is
/// their weighted mean.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitnessWeights {
    /// The share of tasks done right.
    pub success: f64,
    /// How little it cost (calls, tokens, wall time).
    pub efficiency: f64,
    /// How safely it acted (refused actions, failures).
    pub safety: f64,
}

impl Default for FitnessWeights {
    fn default() -> Self {
        Self { success: 0.4, efficiency: 0.3, safety: 0.3 }
    }
}

impl FitnessWeights {
    /// Checks the weights.
    pub fn validate(&self) -> Result<(), EvolutionError> {
        for (field, w) in
            [("success", self.success), ("efficiency", self.efficiency), ("safety", self.safety)]
        {
            if !(w.is_finite() && w >= 0.0) {
                return Err(EvolutionError::Field {
                    field: format!("weights.{field}"),
                    reason: format!("is {w}; it must be a number 0 or more"),
                });
            }
        }
        if self.success + self.efficiency + self.safety <= 0.0 {
            return Err(EvolutionError::Field {
                field: "weights".into(),
                reason: "sum to 0; at least one must be above 0".into(),
            });
        }
        Ok(())
    }

    /// The overall fitness of three scores in 0..=1.
    pub fn combine(&self, success: f64, efficiency: f64, safety: f64) -> f64 {
        let total = self.success + self.efficiency + self.safety;
        (success * self.success + efficiency * self.efficiency + safety * self.safety) / total
    }
}

/// A fitness evaluation's result: named scores and the overall fitness.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fitness {
    /// The overall fitness, 0 to 1.
    pub overall: f64,
    /// Named scores and measurements (`success`, `efficiency`, `safety`, `calls`, ...).
    pub scores: BTreeMap<String, f64>,
    /// Why the genome was scored as failed, when its evaluation failed (then `overall` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

impl Fitness {
    /// The fitness of three scores under `weights`, with the scores named `success`,
    /// `efficiency` and `safety`.
    pub fn weighted(success: f64, efficiency: f64, safety: f64, weights: &FitnessWeights) -> Self {
        let mut scores = BTreeMap::new();
        scores.insert("success".to_owned(), success);
        scores.insert("efficiency".to_owned(), efficiency);
        scores.insert("safety".to_owned(), safety);
        Self { overall: weights.combine(success, efficiency, safety), scores, failure: None }
    }

    /// A genome whose evaluation failed: overall 0, with the reason.
    pub fn failed(reason: impl Into<String>) -> Self {
        Self { overall: 0.0, scores: BTreeMap::new(), failure: Some(reason.into()) }
    }

    /// Checks what an evaluator returned: every score finite, the overall in 0..=1.
    pub fn check(&self) -> Result<(), EvolutionError> {
        if !self.overall.is_finite() || !(0.0..=1.0).contains(&self.overall) {
            return Err(EvolutionError::BadFitness {
                what: format!("the overall fitness is {}; it must be 0 to 1", self.overall),
            });
        }
        if let Some((name, v)) = self.scores.iter().find(|(_, v)| !v.is_finite()) {
            return Err(EvolutionError::BadFitness { what: format!("the score `{name}` is {v}") });
        }
        Ok(())
    }
}

/// The settings of one evolution.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvolutionSettings {
    /// Genomes per generation, 1 to [`MAX_POPULATION`].
    pub population: u32,
    /// Generations after the genesis's (generation 0 is the genesis and its first children),
    /// 1 to [`MAX_GENERATIONS`].
    pub generations: u32,
    /// The seed every random choice comes from.
    pub seed: u64,
    /// Below this overall fitness a genome dies (0.5 by default).
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// How many of the best survivors go on unchanged into the next generation.
    #[serde(default = "default_elitism")]
    pub elitism: u32,
    /// Mutations applied to make one child (1 or more).
    #[serde(default = "default_mutations")]
    pub mutations: u32,
    /// How many evaluations of one generation run at once (1 or more).
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// The weighting of the scores.
    #[serde(default)]
    pub weights: FitnessWeights,
}

const fn default_threshold() -> f64 {
    DEFAULT_THRESHOLD
}
const fn default_elitism() -> u32 {
    1
}
const fn default_mutations() -> u32 {
    1
}
const fn default_concurrency() -> u32 {
    2
}

impl EvolutionSettings {
    /// Settings with `population`, `generations` and `seed`, and the defaults (threshold 0.5,
    /// elitism 1, one mutation per child, two evaluations at once, the default weights).
    pub fn new(population: u32, generations: u32, seed: u64) -> Self {
        Self {
            population,
            generations,
            seed,
            threshold: DEFAULT_THRESHOLD,
            elitism: 1,
            mutations: 1,
            concurrency: 2,
            weights: FitnessWeights::default(),
        }
    }

    /// Checks every field and names the first one that is wrong.
    pub fn validate(&self) -> Result<(), EvolutionError> {
        let bad =
            |field: &str, reason: String| EvolutionError::Field { field: field.into(), reason };
        if !(1..=MAX_POPULATION).contains(&self.population) {
            return Err(bad(
                "population",
                format!("is {}; it must be 1 to {MAX_POPULATION}", self.population),
            ));
        }
        if !(1..=MAX_GENERATIONS).contains(&self.generations) {
            return Err(bad(
                "generations",
                format!("is {}; it must be 1 to {MAX_GENERATIONS}", self.generations),
            ));
        }
        if !(self.threshold.is_finite() && (0.0..=1.0).contains(&self.threshold)) {
            return Err(bad("threshold", format!("is {}; it must be 0 to 1", self.threshold)));
        }
        if self.elitism >= self.population && self.population > 1 {
            return Err(bad(
                "elitism",
                format!(
                    "is {}; it must be below the population ({}) so that children are made",
                    self.elitism, self.population
                ),
            ));
        }
        if !(1..=16).contains(&self.mutations) {
            return Err(bad("mutations", format!("is {}; it must be 1 to 16", self.mutations)));
        }
        if !(1..=256).contains(&self.concurrency) {
            return Err(bad(
                "concurrency",
                format!("is {}; it must be 1 to 256", self.concurrency),
            ));
        }
        self.weights.validate()
    }
}

/// The fate of a genome at the end of its generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fate {
    /// Fitness at or above the threshold.
    Survived,
    /// Fitness below the threshold.
    Died,
}

/// Selection over one evaluated generation: each genome's fate, and the parents of the next.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// Each genome's fate, in the generation's order.
    pub fates: Vec<Fate>,
    /// Indices of the survivors, best first (ties: the lower genome id first).
    pub ranked: Vec<usize>,
    /// Indices of the genomes carried unchanged into the next generation (the best
    /// survivors, at most `elitism`).
    pub elite: Vec<usize>,
}

/// Selects over a generation's `(genome id, overall fitness)`: death below `threshold`,
/// survival otherwise; survivors ranked by fitness; the top `elitism` of them kept.
pub fn select(scored: &[(&GenomeId, f64)], settings: &EvolutionSettings) -> Selection {
    let fates: Vec<Fate> = scored
        .iter()
        .map(|(_, f)| if *f >= settings.threshold { Fate::Survived } else { Fate::Died })
        .collect();
    let mut ranked: Vec<usize> =
        (0..scored.len()).filter(|i| fates[*i] == Fate::Survived).collect();
    ranked.sort_by(|a, b| {
        scored[*b].1.total_cmp(&scored[*a].1).then_with(|| scored[*a].0.cmp(scored[*b].0))
    });
    let mut elite = Vec::new();
    for i in &ranked {
        if elite.len() >= settings.elitism as usize {
            break;
        }
        if !elite.iter().any(|e: &usize| scored[*e].0 == scored[*i].0) {
            elite.push(*i);
        }
    }
    Selection { fates, ranked, elite }
}

/// What a flight-recorder event records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvolutionaryEventType {
    /// A genome was born: a genesis, or a child of its parent.
    Spawn,
    /// A genome's configuration or code changed: a mutation made a child, or a live agent
    /// was hot-swapped to another genome.
    Mutate,
    /// A fitness evaluation finished.
    GymEval,
    /// Fitness below the threshold.
    Death,
    /// The genome survives its generation (or a hot-swap completed).
    Survival,
}

impl EvolutionaryEventType {
    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            EvolutionaryEventType::Spawn => "spawn",
            EvolutionaryEventType::Mutate => "mutate",
            EvolutionaryEventType::GymEval => "gym_eval",
            EvolutionaryEventType::Death => "death",
            EvolutionaryEventType::Survival => "survival",
        }
    }
}

impl fmt::Display for EvolutionaryEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One flight-recorder event (docs/concepts.md#evolution).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvolutionaryEvent {
    /// When (milliseconds since the epoch, from the caller's clock).
    pub timestamp: Timestamp,
    /// The genome.
    pub genome_id: GenomeId,
    /// Its parent.
    #[serde(default)]
    pub parent_id: Option<GenomeId>,
    /// Its generation in the evolution (0 = genesis).
    pub generation: u32,
    /// What happened.
    pub event_type: EvolutionaryEventType,
    /// The context: the genome itself (spawn), the mutation (mutate), the reason (death), the
    /// old and new genome (a hot-swap).
    #[serde(default)]
    pub payload: Value,
    /// The scores, for `gym_eval`, `death` and `survival`.
    #[serde(default)]
    pub fitness_metrics: Option<BTreeMap<String, f64>>,
    /// The agent the genome is (in an evolution: `evolution/<generation>/<index>`).
    pub agent_id: String,
    /// The ids from the genesis to this genome.
    #[serde(default)]
    pub lineage_path: Vec<GenomeId>,
}

impl Versioned for EvolutionaryEvent {
    const KIND: &'static str = "evolutionary_event";
    const VERSION: u32 = 1;
}

impl Versioned for Genome {
    const KIND: &'static str = "genome";
    const VERSION: u32 = 1;
}

/// One node of the family tree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LineageNode {
    /// The genome.
    pub genome_id: GenomeId,
    /// Its parent, `None` for the genesis.
    pub parent_id: Option<GenomeId>,
    /// The first generation it appeared in.
    pub generation: u32,
    /// Its best overall fitness, when evaluated.
    pub fitness: Option<f64>,
    /// Its last fate.
    pub fate: Option<Fate>,
    /// The mutations that made it from its parent, in words.
    pub mutations: Vec<String>,
    /// Whether a live agent was hot-swapped to it.
    pub adopted: bool,
}

/// The family tree the flight recorder's events rebuild.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Lineage {
    /// The genesis genomes (usually one).
    pub genesis: Vec<GenomeId>,
    /// Every genome, by id.
    pub nodes: BTreeMap<GenomeId, LineageNode>,
    /// The best genome and its fitness.
    pub best: Option<(GenomeId, f64)>,
    /// How many events it was built from.
    pub events: usize,
}

impl Lineage {
    /// Rebuilds the tree from events in recorded order.
    pub fn from_events(events: &[EvolutionaryEvent]) -> Self {
        let mut tree = Lineage { events: events.len(), ..Lineage::default() };
        for event in events {
            let node = tree.nodes.entry(event.genome_id.clone()).or_insert_with(|| LineageNode {
                genome_id: event.genome_id.clone(),
                parent_id: event.parent_id.clone(),
                generation: event.generation,
                fitness: None,
                fate: None,
                mutations: Vec::new(),
                adopted: false,
            });
            match event.event_type {
                EvolutionaryEventType::Spawn => {
                    if event.parent_id.is_none() && !tree.genesis.contains(&event.genome_id) {
                        tree.genesis.push(event.genome_id.clone());
                    }
                }
                EvolutionaryEventType::Mutate => {
                    if event.payload.get("evolution_type").and_then(Value::as_str)
                        == Some("hot_swap")
                    {
                        node.adopted = true;
                    } else if let Some(m) = event.payload.get("mutation") {
                        let text = describe_mutation(m);
                        if !node.mutations.contains(&text) {
                            node.mutations.push(text);
                        }
                    }
                }
                EvolutionaryEventType::GymEval => {
                    let overall = event
                        .fitness_metrics
                        .as_ref()
                        .and_then(|m| m.get("overall_fitness").copied());
                    if let Some(f) = overall {
                        node.fitness = Some(node.fitness.map_or(f, |g: f64| g.max(f)));
                        let better = tree
                            .best
                            .as_ref()
                            .is_none_or(|(id, b)| f > *b || (f == *b && event.genome_id < *id));
                        if better {
                            tree.best = Some((event.genome_id.clone(), f));
                        }
                    }
                }
                EvolutionaryEventType::Death => node.fate = Some(Fate::Died),
                EvolutionaryEventType::Survival => {
                    if event.payload.get("evolved_to").is_none() {
                        node.fate = Some(Fate::Survived);
                    }
                }
            }
        }
        tree
    }

    /// The tree as JSON: `{genesis, best, nodes: [...]}`, nodes in generation then id order.
    pub fn to_json(&self) -> Value {
        let mut nodes: Vec<&LineageNode> = self.nodes.values().collect();
        nodes.sort_by(|a, b| a.generation.cmp(&b.generation).then(a.genome_id.cmp(&b.genome_id)));
        serde_json::json!({
            "genesis": self.genesis,
            "best": self.best.as_ref().map(|(id, f)| serde_json::json!({"genome_id": id, "fitness": f})),
            "events": self.events,
            "nodes": nodes,
        })
    }

    /// The tree as a Graphviz DOT digraph: a node per genome labelled with its short id,
    /// generation and fitness (dead genomes grey, the best one bold), an edge from each parent
    /// labelled with the mutation.
    pub fn to_dot(&self) -> String {
        let mut out = String::from(
            "digraph lineage {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
        );
        for node in self.ordered() {
            let fitness = node.fitness.map_or("not evaluated".to_owned(), |f| format!("{f:.3}"));
            let mut style = Vec::new();
            if node.fate == Some(Fate::Died) {
                style.push("color=grey, fontcolor=grey");
            }
            if self.best.as_ref().is_some_and(|(id, _)| *id == node.genome_id) {
                style.push("penwidth=3");
            }
            if node.adopted {
                style.push("peripheries=2");
            }
            let extra =
                if style.is_empty() { String::new() } else { format!(", {}", style.join(", ")) };
            let _ = writeln!(
                out,
                "  \"{}\" [label=\"{}\\ngen {}\\nfitness {}\"{}];",
                node.genome_id,
                node.genome_id.short(),
                node.generation,
                fitness,
                extra
            );
        }
        for node in self.ordered() {
            if let Some(parent) = &node.parent_id {
                let label = dot_escape(&node.mutations.join("; "));
                let _ =
                    writeln!(out, "  \"{parent}\" -> \"{}\" [label=\"{label}\"];", node.genome_id);
            }
        }
        out.push_str("}\n");
        out
    }

    /// The tree as a Mermaid flowchart.
    pub fn to_mermaid(&self) -> String {
        let mut out = String::from("flowchart TD\n");
        for node in self.ordered() {
            let fitness = node.fitness.map_or("n/a".to_owned(), |f| format!("{f:.3}"));
            let fate = match node.fate {
                Some(Fate::Died) => " dead",
                Some(Fate::Survived) => "",
                None => "",
            };
            let _ = writeln!(
                out,
                "  g{}[\"{} gen {} fitness {}{}\"]",
                node.genome_id.short(),
                node.genome_id.short(),
                node.generation,
                fitness,
                fate
            );
        }
        for node in self.ordered() {
            if let Some(parent) = &node.parent_id {
                let label = mermaid_escape(&node.mutations.join("; "));
                if label.is_empty() {
                    let _ = writeln!(out, "  g{} --> g{}", parent.short(), node.genome_id.short());
                } else {
                    let _ = writeln!(
                        out,
                        "  g{} -->|\"{label}\"| g{}",
                        parent.short(),
                        node.genome_id.short()
                    );
                }
            }
        }
        if let Some((best, _)) = &self.best {
            let _ = writeln!(out, "  style g{} stroke-width:4px", best.short());
        }
        out
    }

    /// The nodes by generation, then id.
    pub fn ordered(&self) -> Vec<&LineageNode> {
        let mut nodes: Vec<&LineageNode> = self.nodes.values().collect();
        nodes.sort_by(|a, b| a.generation.cmp(&b.generation).then(a.genome_id.cmp(&b.genome_id)));
        nodes
    }

    /// The parent of every genome, as edges `(parent, child)`.
    pub fn edges(&self) -> Vec<(GenomeId, GenomeId)> {
        self.ordered()
            .into_iter()
            .filter_map(|n| n.parent_id.clone().map(|p| (p, n.genome_id.clone())))
            .collect()
    }
}

/// A mutation in words: `max_retries = 3`, `prompt: "..."`, `tools -shell`.
pub fn describe_mutation(modification: &Value) -> String {
    let kind = modification.get("modification_type").and_then(Value::as_str).unwrap_or("?");
    let target = modification.get("target").and_then(Value::as_str).unwrap_or("?");
    let change = modification.get("change").cloned().unwrap_or(Value::Null);
    match kind {
        "config" => format!("{target} = {}", change.get("value").cloned().unwrap_or(Value::Null)),
        "behavior" | "behaviour" => {
            format!("strategy.{target} = {}", change.get("value").cloned().unwrap_or(Value::Null))
        }
        "prompt" => {
            let text = change.get("text").or_else(|| change.get("append"));
            let text = text.and_then(Value::as_str).unwrap_or("");
            format!("prompt: {}", crate::shorten(text, 24))
        }
        "architecture" => {
            let mut parts = Vec::new();
            for (key, sign) in [("add", '+'), ("remove", '-')] {
                if let Some(Value::Array(items)) = change.get(key) {
                    for item in items {
                        parts.push(format!("{sign}{}", item.as_str().unwrap_or("?")));
                    }
                }
            }
            format!("tools {}", parts.join(" "))
        }
        "code" => format!("code {target}"),
        other => format!("{other} {target}"),
    }
}

fn dot_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', " ")
}

fn mermaid_escape(text: &str) -> String {
    text.replace('"', "'").replace(['\n', '|'], " ")
}

/// A genome, mutation, settings or fitness that is not valid. Nothing was changed.
#[derive(Debug, Error)]
pub enum EvolutionError {
    /// A field breaks a rule.
    #[error("`{field}` {reason}")]
    Field {
        /// The field, such as `population` or `genes.max_retries`.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A mutation puts a value outside its gene's declared bounds.
    #[error("mutation of `{field}` is outside its declared bounds: {reason}")]
    OutOfBounds {
        /// The gene's target.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A mutation that cannot apply.
    #[error("mutation of `{field}` refused: {reason}")]
    Mutation {
        /// The target.
        field: String,
        /// Why.
        reason: String,
    },
    /// The result would hold a tool beyond the genome's permissions.
    #[error("refused: it would widen the genome's permissions: {what}")]
    WidensPermissions {
        /// What, in words.
        what: String,
    },
    /// No gene of the search space can move.
    #[error(
        "nothing to mutate: the search space declares no gene that can change (add genes with a range, several values or variants)"
    )]
    NothingToMutate,
    /// An evaluator returned a fitness that is not valid.
    #[error("invalid fitness: {what}")]
    BadFitness {
        /// What is wrong.
        what: String,
    },
    /// A value that cannot be serialised.
    #[error("cannot serialise: {0}")]
    Json(#[from] serde_json::Error),
}
