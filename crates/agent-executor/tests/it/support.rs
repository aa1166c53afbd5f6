//! What the tests share: a workspace in a temporary directory, an executor of the built-in
//! kinds on it, contexts on the rule-based and scripted reasoners, and a recorder of a run's
//! events.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use agent_core::tools::ToolContext;
use agent_core::{RuleBasedReasoner, ScriptedAnswer, ScriptedReasoner};
use agent_executor::{ExecEnv, Executor, RunContext, builtins};
use agent_state::{RetryPolicy, RunEvent};

/// A workspace: `root` is `<tempdir>/ws`, so a test can check that nothing was written next
/// to it (in `outside`).
pub(crate) struct Workspace {
    _dir: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) outside: PathBuf,
}

impl Workspace {
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ws");
        std::fs::create_dir_all(&root).unwrap();
        let outside = dir.path().to_path_buf();
        Self { _dir: dir, root, outside }
    }

    /// Writes `content` to `path` (relative), creating its directories.
    pub(crate) fn write(&self, path: &str, content: &str) {
        let path = self.root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    pub(crate) fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.root.join(path)).unwrap()
    }

    pub(crate) fn exists(&self, path: &str) -> bool {
        self.root.join(path).exists()
    }

    /// An environment on this workspace, with the built-in tools, no hosts and no endpoints.
    pub(crate) fn env(&self) -> ExecEnv {
        ExecEnv::with_workspace(Arc::new(ToolContext::new(&self.root).unwrap()))
    }
}

/// The default policy with tiny delays: a retry waits 5 ms (real time; HTTP tests use real
/// sockets).
pub(crate) fn fast_policy() -> RetryPolicy {
    RetryPolicy { initial_delay_ms: 5, ..RetryPolicy::executor_default() }
}

/// An executor of the built-in kinds in `env`, with [`fast_policy`].
pub(crate) fn executor(env: ExecEnv) -> Executor {
    Executor::new(builtins()).with_env(env).with_policy(fast_policy())
}

/// What a run told its observer.
#[derive(Clone, Default)]
pub(crate) struct Events(Arc<Mutex<Vec<RunEvent>>>);

impl Events {
    pub(crate) fn all(&self) -> Vec<RunEvent> {
        self.0.lock().unwrap().clone()
    }

    /// The progress percentages, in order.
    pub(crate) fn percents(&self) -> Vec<u8> {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                RunEvent::Progress { percent, .. } => Some(percent),
                _ => None,
            })
            .collect()
    }

    /// The data of the notes called `name`, in order.
    pub(crate) fn notes(&self, name: &str) -> Vec<serde_json::Value> {
        self.all()
            .into_iter()
            .filter_map(|e| match e {
                RunEvent::Note { name: n, data, .. } if n == name => Some(data),
                _ => None,
            })
            .collect()
    }

    /// Everything the run told, as text (to look for what must not be there).
    pub(crate) fn text(&self) -> String {
        serde_json::to_string(&self.all()).unwrap()
    }
}

/// A context for a run of `kind` on the rule-based reasoner, recording its events.
pub(crate) fn rule_based(kind: &str) -> (RunContext, Events) {
    observed(RunContext::standalone(kind, Arc::new(RuleBasedReasoner::new())))
}

/// A context for a run of `kind` on a scripted reasoner answering `answers`, recording its
/// events; the reasoner is returned to read its requests.
pub(crate) fn scripted(
    kind: &str,
    answers: Vec<ScriptedAnswer>,
) -> (RunContext, Events, Arc<ScriptedReasoner>) {
    let reasoner = Arc::new(ScriptedReasoner::from_answers(answers));
    let (cx, events) = observed(RunContext::standalone(kind, reasoner.clone()));
    (cx, events, reasoner)
}

fn observed(cx: RunContext) -> (RunContext, Events) {
    let events = Events::default();
    let sink = events.0.clone();
    let observer = move |event: &RunEvent| sink.lock().unwrap().push(event.clone());
    (cx.with_observer(Arc::new(observer)), events)
}

/// Asserts that progress was reported, never fell, and reached 100.
pub(crate) fn assert_rising_to_100(events: &Events) {
    let percents = events.percents();
    assert!(percents.len() >= 3, "progress at meaningful points: {percents:?}");
    assert!(percents.windows(2).all(|w| w[0] <= w[1]), "rising: {percents:?}");
    assert_eq!(percents.last(), Some(&100), "{percents:?}");
}
