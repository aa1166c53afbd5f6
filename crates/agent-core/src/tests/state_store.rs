//! The tool records of a [`StateStore`]: one sequence of `begin_tool`, `record_tool` and
//! `forget_tool` calls, checked against a map after every step, on the in-memory store and (with
//! feature `sled`) on a run directory closed and reopened along the way.

use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::StateStore;
use crate::tools::ToolOutput;

/// One step of the sequence.
enum Op {
    Begin(&'static str),
    Record(&'static str, ToolOutput),
    Forget(&'static str),
    /// Close the store and open it again; the in-memory store skips it.
    Restart,
}

/// Every key the sequence touches, and one it never does.
const KEYS: [&str; 6] = [
    "bottom-1/task-1:s1#1#0",
    "bottom-1/task-1:s1#1#1",
    "bottom-2/task-1:s1#1#0",
    "é/ü",
    "",
    "never",
];

fn output(text: &str, success: bool) -> ToolOutput {
    ToolOutput {
        success,
        output: text.into(),
        data: json!({ "exit_code": if success { 0 } else { 1 }, "nested": { "list": [1, "two", null] } }),
    }
}

fn ops() -> Vec<Op> {
    use Op::*;
    let [a, b, c, odd, empty, _] = KEYS;
    vec![
        Begin(a),
        Record(a, output("first", true)),
        Begin(b),
        Restart,
        Record(b, output("a failed command", false)),
        Forget(a),
        Forget(c),
        Record(c, output("recorded without a begin", true)),
        Begin(c),
        Begin(odd),
        Record(empty, output("", true)),
        Restart,
        Record(a, output(&"x".repeat(100_000), true)),
        Record(a, output("replaced", true)),
        Forget(odd),
        Begin(odd),
        Restart,
        Forget(b),
        Restart,
    ]
}

/// A store under test, which may be closed and reopened.
trait Backend {
    fn store(&self) -> &dyn StateStore;
    fn restart(&mut self);
}

/// Applies [`ops`] to `backend` and to a map, comparing every key after every step.
async fn check(backend: &mut dyn Backend) {
    let mut model: BTreeMap<&str, Option<ToolOutput>> = BTreeMap::new();
    for (step, op) in ops().into_iter().enumerate() {
        match op {
            Op::Begin(key) => {
                backend.store().begin_tool(key).await.unwrap();
                model.insert(key, None);
            }
            Op::Record(key, output) => {
                backend.store().record_tool(key, &output).await.unwrap();
                model.insert(key, Some(output));
            }
            Op::Forget(key) => {
                backend.store().forget_tool(key).await.unwrap();
                model.remove(key);
            }
            Op::Restart => backend.restart(),
        }
        for key in KEYS {
            let found = backend.store().tool(key).await.unwrap();
            assert_eq!(found, model.get(key).cloned(), "step {step}, key {key:?}");
        }
    }
}

struct Memory(InMemoryStateStore);

impl Backend for Memory {
    fn store(&self) -> &dyn StateStore {
        &self.0
    }

    fn restart(&mut self) {}
}

#[tokio::test(start_paused = true)]
async fn the_in_memory_store_keeps_tool_records_like_a_map() {
    check(&mut Memory(InMemoryStateStore::new())).await;
}

#[cfg(feature = "sled")]
mod on_sled {
    use std::path::{Path, PathBuf};

    use agent_state::{BackendError, Timestamp};
    use run_store::{Durability, RunStore};

    use super::*;
    use crate::SledStateStore;

    /// A run directory's state store, reopened from disk on restart.
    struct Sled {
        dir: PathBuf,
        store: Option<SledStateStore>,
        _root: TempDir,
    }

    impl Sled {
        fn create() -> Self {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("run");
            let run = RunStore::create(&dir, "run-1", Timestamp(0), Durability::Synced).unwrap();
            let store = Some(SledStateStore::open(&run).unwrap());
            Self { dir, store, _root: root }
        }
    }

    impl Backend for Sled {
        fn store(&self) -> &dyn StateStore {
            self.store.as_ref().unwrap()
        }

        fn restart(&mut self) {
            // The state store holds the only clone of its run store: dropping it closes the run.
            self.store = None;
            let run = reopen(&self.dir);
            self.store = Some(SledStateStore::open(&run).unwrap());
        }
    }

    /// Opens the run again once the last store on it has closed.
    ///
    /// sled 0.34 can hold its database file a moment after the last handle drops (sled issues
    /// #1234 and #1289), so this waits on the lock itself rather than for some time.
    fn reopen(dir: &Path) -> RunStore {
        let db = std::fs::File::open(dir.join(run_store::DB_DIR).join("db")).unwrap();
        db.lock().unwrap();
        drop(db);
        RunStore::open(dir, Durability::Synced).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn the_sled_store_keeps_tool_records_like_a_map_across_restarts() {
        check(&mut Sled::create()).await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_tool_record_is_an_error_naming_its_key() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("run");
        let run = RunStore::create(&dir, "run-1", Timestamp(0), Durability::Synced).unwrap();
        let store = SledStateStore::open(&run).unwrap();
        store.begin_tool("good").await.unwrap();
        let tools = run.tree("tools").unwrap();
        tools.insert("bottom-1/bad", b"not a record".as_slice()).unwrap();

        let err: BackendError = store.tool("bottom-1/bad").await.unwrap_err();

        assert!(err.to_string().contains("tool record `bottom-1/bad` cannot be read"), "{err}");
        assert_eq!(store.tool("good").await.unwrap(), Some(None));
    }
}
