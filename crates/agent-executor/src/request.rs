//! What a caller asks for ([`RunRequest`]) and the requests the executor refuses before a run
//! exists ([`ExecError`]).

use agent_state::RunId;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The longest objective, in bytes.
pub const MAX_OBJECTIVE_BYTES: usize = 16 * 1024;

/// The largest `inputs` object, in bytes of JSON.
pub const MAX_INPUTS_BYTES: usize = 256 * 1024;

/// One run of one kind on one objective.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRequest {
    /// The run's id: unique (it names the capsule's scratch directory); a request whose id
    /// breaks [`RunId`]'s rule does not deserialise.
    pub run_id: RunId,
    /// The agent kind (`research_agent`, ...).
    pub kind: String,
    /// What to do, in words.
    pub objective: String,
    /// The kind's inputs (a JSON object; see each kind's schema). `null` means none.
    #[serde(default)]
    pub inputs: serde_json::Value,
}

impl RunRequest {
    /// A request with a fresh run id and no inputs.
    pub fn new(kind: impl Into<String>, objective: impl Into<String>) -> Self {
        Self {
            run_id: fresh_run_id(),
            kind: kind.into(),
            objective: objective.into(),
            inputs: serde_json::Value::Null,
        }
    }

    /// The same request with `inputs`.
    #[must_use]
    pub fn with_inputs(mut self, inputs: serde_json::Value) -> Self {
        self.inputs = inputs;
        self
    }

    /// The same request with `run_id`.
    #[must_use]
    pub fn with_run_id(mut self, run_id: RunId) -> Self {
        self.run_id = run_id;
        self
    }

    /// The input `name` as a string, if given as one.
    pub fn input_str(&self, name: &str) -> Option<&str> {
        self.inputs.get(name).and_then(serde_json::Value::as_str)
    }
}

/// A request refused before any run started: nothing ran and nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ExecError {
    /// No kind of that name is registered.
    #[error("unknown agent kind `{kind}`; the kinds are: {known}")]
    UnknownKind {
        /// The name asked for.
        kind: String,
        /// The registered names, comma-separated.
        known: String,
    },
    /// The objective is empty or only whitespace.
    #[error("the objective is empty: say in words what the `{kind}` run should do")]
    EmptyObjective {
        /// The kind.
        kind: String,
    },
    /// The objective is longer than [`MAX_OBJECTIVE_BYTES`].
    #[error(
        "the objective is {bytes} bytes, over the limit of {limit}: shorten it, or put the \
         material in a workspace file and name it in the objective"
    )]
    ObjectiveTooLong {
        /// Its size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The inputs are not an object, are too large, or do not match the kind's schema.
    #[error("inputs of the `{kind}` run: {problem}")]
    BadInputs {
        /// The kind.
        kind: String,
        /// What is wrong.
        problem: String,
    },
    /// A request of a batch never got a result: its task was cancelled (the runtime is shutting
    /// down).
    #[error("the request ended without a result: {reason}")]
    Aborted {
        /// What ended it.
        reason: String,
    },
}

/// A new random run id: 32 hex digits.
fn fresh_run_id() -> RunId {
    RunId::hex(uuid::Uuid::new_v4().as_u128())
}
