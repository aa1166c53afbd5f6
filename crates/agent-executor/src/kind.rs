//! Agent kinds and their registry (docs/concepts.md#executor-kinds).
//!
//! A kind is a name and a handler: `(request, capsule) -> output`. The capsule is the run's own
//! context (progress sink, reasoner, scratch directory, budget share); see [`Capsule`].

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use agent_state::{Artifact, FailureKind, RetryPolicy, RunFailure};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::capsule::Capsule;
use crate::request::RunRequest;

/// An agent kind: what a run of it does with its objective.
///
/// A handler reports progress through [`Capsule::progress`], reaches the agent's reasoner
/// through [`Capsule::compose`] and [`Capsule::reasoner`], and returns its output, or a
/// [`KindError`] whose [`FailureKind`] decides what happens next: transient kinds are retried
/// by the policy, [`FailureKind::MissingInput`] blocks the run (escalated, not retried), any
/// other fails it at once.
#[async_trait]
pub trait Kind: Send + Sync + 'static {
    /// The name it is registered and looked up by (`research_agent`).
    fn name(&self) -> &str;

    /// What it does, in one line (listed by `strata exec --list` and shown to models).
    fn description(&self) -> &str;

    /// The JSON Schema of its `inputs` object (an object schema; `{}` when it takes none).
    fn inputs_schema(&self) -> serde_json::Value {
        serde_json::json!({ "type": "object" })
    }

    /// Whether running it twice on the same request is harmless. A run of a kind that is not
    /// (it calls external services) is never repeated after a crash interrupted it.
    fn idempotent(&self) -> bool {
        true
    }

    /// Its own retry policy, if it differs from the executor's default.
    fn policy(&self) -> Option<RetryPolicy> {
        None
    }

    /// Runs one attempt.
    async fn run(
        &self,
        request: &RunRequest,
        capsule: &mut Capsule,
    ) -> Result<KindOutput, KindError>;
}

/// What a successful attempt returns; the executor wraps it in the run's
/// [`RunResponse`](crate::RunResponse).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KindOutput {
    /// The main result, in words (notes, a draft, a plan file, an endpoint's answer).
    pub primary_output: String,
    /// How sure the kind is of it, 0..1 (clamped).
    pub confidence: f64,
    /// Files it wrote or consulted, relative to the workspace.
    pub artifacts: Vec<Artifact>,
    /// Structured data (sources, the plan's steps, an endpoint's status and body).
    pub data: serde_json::Value,
    /// What part of the objective needs a model reasoner and was not done, when the kind ran
    /// on a reasoner that cannot write (the rule-based one).
    pub needs_model: Option<String>,
}

impl KindOutput {
    /// An output with `primary_output` and `confidence`.
    pub fn new(primary_output: impl Into<String>, confidence: f64) -> Self {
        Self { primary_output: primary_output.into(), confidence, ..Self::default() }
    }
}

/// Why an attempt failed, with its class.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct KindError(pub RunFailure);

impl KindError {
    /// A failure of `kind`.
    pub fn new(kind: FailureKind, reason: impl Into<String>) -> Self {
        Self(RunFailure::new(kind, reason))
    }

    /// Bad input: permanent.
    pub fn invalid(reason: impl Into<String>) -> Self {
        Self::new(FailureKind::InvalidInput, reason)
    }

    /// Something the run needs was not given: the run is blocked.
    pub fn missing(what: impl Into<String>) -> Self {
        Self::new(FailureKind::MissingInput, what)
    }

    /// The class of failure.
    pub fn kind(&self) -> FailureKind {
        self.0.kind
    }
}

impl From<RunFailure> for KindError {
    fn from(failure: RunFailure) -> Self {
        Self(failure)
    }
}

/// The future a closure handler returns.
pub type KindFuture<'a> = Pin<Box<dyn Future<Output = Result<KindOutput, KindError>> + Send + 'a>>;

/// A kind made of a name, a description and a closure.
pub struct FnKind<F> {
    name: String,
    description: String,
    idempotent: bool,
    handler: F,
}

impl<F> FnKind<F>
where
    F: for<'a> Fn(&'a RunRequest, &'a mut Capsule) -> KindFuture<'a> + Send + Sync + 'static,
{
    /// A kind called `name` that runs `handler`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self {
        Self { name: name.into(), description: description.into(), idempotent: true, handler }
    }

    /// Declares that running it twice is not harmless (see [`Kind::idempotent`]).
    #[must_use]
    pub fn with_side_effects(mut self) -> Self {
        self.idempotent = false;
        self
    }
}

#[async_trait]
impl<F> Kind for FnKind<F>
where
    F: for<'a> Fn(&'a RunRequest, &'a mut Capsule) -> KindFuture<'a> + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn idempotent(&self) -> bool {
        self.idempotent
    }

    async fn run(
        &self,
        request: &RunRequest,
        capsule: &mut Capsule,
    ) -> Result<KindOutput, KindError> {
        (self.handler)(request, capsule).await
    }
}

/// A refused registration.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RegistryError {
    /// The name is taken.
    #[error("an agent kind named `{0}` is registered already; choose another name")]
    Duplicate(String),
    /// The name is empty, too long, or not made of `a-z`, `0-9` and `_`.
    #[error(
        "`{0}` is not a valid agent kind name: use 1 to 64 characters from a-z, 0-9 and `_`, \
         starting with a letter"
    )]
    BadName(String),
}

/// The kinds an executor knows, by name.
#[derive(Clone, Default)]
pub struct Registry {
    kinds: BTreeMap<String, Arc<dyn Kind>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.kinds.keys()).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `kind` under its name; a name registered twice is refused.
    pub fn register(&mut self, kind: impl Kind) -> Result<(), RegistryError> {
        self.register_arc(Arc::new(kind))
    }

    /// [`register`](Self::register) for a shared kind.
    pub fn register_arc(&mut self, kind: Arc<dyn Kind>) -> Result<(), RegistryError> {
        let name = kind.name().to_owned();
        if !valid_kind_name(&name) {
            return Err(RegistryError::BadName(name));
        }
        if self.kinds.contains_key(&name) {
            return Err(RegistryError::Duplicate(name));
        }
        self.kinds.insert(name, kind);
        Ok(())
    }

    /// The kind called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Kind>> {
        self.kinds.get(name)
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.kinds.contains_key(name)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.kinds.keys().map(String::as_str)
    }

    /// The registered kinds, by name.
    pub fn kinds(&self) -> impl Iterator<Item = &Arc<dyn Kind>> {
        self.kinds.values()
    }
}

/// Whether `name` may name a kind: 1 to 64 of `a-z`, `0-9`, `_`, starting with a letter.
pub fn valid_kind_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}
