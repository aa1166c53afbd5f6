//! The sled backends: the conformance suite with real restarts (the run directory closed and
//! opened again).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_core::testing::{StoreFactory, Stores, run_conformance};
use agent_core::{SledAuditLog, SledStateStore};
use agent_state::Timestamp;
use run_store::{Durability, RunStore};

/// The suite runs thousands of commits and checks behaviour across closing and reopening the
/// database: without `fdatasync` it takes a fraction of the time.
const DURABILITY: Durability = Durability::NoSync;

/// Makes sled stores, each in a new run directory; `reopen` closes the database and opens it
/// again from disk.
struct Sled {
    root: tempfile::TempDir,
    runs: AtomicUsize,
    /// Where each open run lives, by the address of its audit log.
    open: Mutex<HashMap<usize, PathBuf>>,
    /// How many times a database was closed and opened again.
    reopens: Arc<AtomicUsize>,
}

fn key(stores: &Stores) -> usize {
    Arc::as_ptr(&stores.audit).cast::<()>() as usize
}

impl Sled {
    fn keep(&self, dir: PathBuf, store: &RunStore) -> Stores {
        let stores = Stores {
            audit: Arc::new(SledAuditLog::open(store).unwrap()),
            state: Arc::new(SledStateStore::open(store).unwrap()),
        };
        self.open.lock().unwrap().insert(key(&stores), dir);
        stores
    }
}

/// Opens the run again once the last handle on it has closed.
///
/// sled 0.34 can hold its database file a moment after the last handle drops (sled issues
/// #1234 and #1289), so this waits on the lock itself rather than for some time.
fn reopen(dir: &Path) -> RunStore {
    let db = std::fs::File::open(dir.join(run_store::DB_DIR).join("db")).unwrap();
    db.lock().unwrap();
    drop(db);
    RunStore::open(dir, DURABILITY).unwrap()
}

#[async_trait::async_trait]
impl StoreFactory for Sled {
    async fn fresh(&self) -> Stores {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let dir = self.root.path().join(format!("run-{n}"));
        let store = RunStore::create(&dir, &format!("run-{n}"), Timestamp(0), DURABILITY).unwrap();
        self.keep(dir, &store)
    }

    async fn reopen(&self, stores: Stores) -> Option<Stores> {
        let dir = self.open.lock().unwrap().remove(&key(&stores))?;
        assert_eq!(Arc::strong_count(&stores.audit), 1, "the suite holds another audit handle");
        assert_eq!(Arc::strong_count(&stores.state), 1, "the suite holds another state handle");
        // The last handles: the trees and the store close, releasing sled's lock.
        drop(stores);
        let store = reopen(&dir);
        self.reopens.fetch_add(1, Ordering::Relaxed);
        Some(self.keep(dir, &store))
    }

    async fn discard(&self, stores: Stores) {
        self.open.lock().unwrap().remove(&key(&stores));
    }
}

#[test]
fn sled_stores_pass_the_conformance_suite_with_real_restarts() {
    let reopens = Arc::new(AtomicUsize::new(0));
    run_conformance(Sled {
        root: tempfile::tempdir().unwrap(),
        runs: AtomicUsize::new(0),
        open: Mutex::new(HashMap::new()),
        reopens: Arc::clone(&reopens),
    });
    // The probe and the restart scenarios' three (the generated sequences' restarts come on
    // top, as many as `PROPTEST_CASES` draws).
    assert!(reopens.load(Ordering::Relaxed) >= 4, "the suite reopened {reopens:?} times");
}

/// 100 transitions appended as one batch: what an idle team's shutdown appends.
fn transitions(n: u64) -> Vec<agent_core::AuditEntry> {
    (0..n)
        .map(|i| agent_core::AuditEntry {
            agent: agent_state::AgentId::new(format!("executor-{i}")),
            at: Timestamp(i),
            event: agent_core::AuditEvent::Transition {
                from: agent_state::AgentStatus::Idle,
                to: agent_state::AgentStatus::ShuttingDown,
                reason: "shutdown requested".into(),
            },
        })
        .collect()
}

/// A new run whose audit log holds `n` transitions appended as one batch, the log closed.
struct Appended {
    _root: tempfile::TempDir,
    dir: PathBuf,
    rt: tokio::runtime::Runtime,
    store: RunStore,
    records: Vec<agent_core::AuditRecord>,
}

fn appended(n: u64) -> Appended {
    use agent_core::AuditLog;
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("run");
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store = RunStore::create(&dir, "run", Timestamp(0), DURABILITY).unwrap();
    let log = SledAuditLog::open(&store).unwrap();
    let records = rt.block_on(log.append_many(transitions(n))).unwrap();
    Appended { _root: root, dir, rt, store, records }
}

/// A batch is stored several records to a value (each a sled insert, the cost of appending),
/// and reads back whole, as the records it was, after the run is closed and opened again.
#[test]
fn a_batch_is_stored_several_records_to_a_value() {
    use agent_core::AuditLog;
    let Appended { _root, dir, rt, store, records: appended } = appended(100);
    let values = store.tree("audit").unwrap().len();
    assert!((2..=20).contains(&values), "100 records in {values} values");
    drop(store);

    let store = reopen(&dir);
    let log = SledAuditLog::open(&store).unwrap();
    assert_eq!(rt.block_on(log.records(None)).unwrap(), appended);
    assert_eq!(rt.block_on(log.records_from(57)).unwrap(), appended[57..].to_vec());
    agent_core::verify_chain(&appended).unwrap();
    let next = rt.block_on(log.append(
        &agent_state::AgentId::new("lead"),
        Timestamp(9),
        appended[0].event.clone(),
    ));
    assert_eq!(next.unwrap(), 100);
}

/// A stored batch whose records are not numbered on from its key is an error naming the key,
/// and the log is not opened on it.
#[test]
fn a_batch_out_of_order_is_an_error_naming_it() {
    let Appended { _root, store, .. } = appended(10);
    let tree = store.tree("audit").unwrap();
    let (key, value) = tree.last().unwrap().unwrap();
    // The chunk moved one number up: its records no longer start at its key.
    tree.remove(&key).unwrap();
    let moved = u64::from_be_bytes(key.as_ref().try_into().unwrap()) + 1;
    tree.insert(moved.to_be_bytes(), value).unwrap();
    let err = SledAuditLog::open(&store).err().unwrap();
    assert_eq!(
        err.message,
        format!(
            "audit record {moved} cannot be read: its record 0 is numbered {}, not in order from the key",
            moved - 1
        )
    );
}

/// `agent_counts` reads each record's counts, a version 1 record's too, and a stored value
/// that is not a record is the error `agents` gives for it, naming the agent.
#[test]
fn agent_counts_read_old_records_and_name_a_damaged_one() {
    use agent_core::StateStore;
    let root = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let store =
        RunStore::create(&root.path().join("run"), "run", Timestamp(0), DURABILITY).unwrap();
    let state = SledStateStore::open(&store).unwrap();
    let metrics = agent_state::AgentMetrics { tasks_completed: 4, ..Default::default() };
    let tree = store.tree("agents").unwrap();
    let old = serde_json::json!({
        "kind": "agent_record",
        "schema_version": 1,
        "value": {"id": "old", "metrics": metrics, "retries": 2, "heartbeat": 7,
                  "processed": [], "behavior": {"notes": ["x"]}}
    });
    tree.insert("old", serde_json::to_vec(&old).unwrap()).unwrap();
    let counts = rt.block_on(state.agent_counts()).unwrap();
    let want = agent_core::AgentCounts {
        id: agent_state::AgentId::new("old"),
        metrics: metrics.clone(),
        retries: 2,
    };
    assert_eq!(counts, vec![want.clone()]);
    assert_eq!(
        rt.block_on(state.agents())
            .unwrap()
            .into_iter()
            .map(agent_core::AgentCounts::of)
            .collect::<Vec<_>>(),
        vec![want]
    );

    tree.insert("zz", b"{\"kind\":\"agent_record\",\"schema_version\":9}".to_vec()).unwrap();
    let counted = rt.block_on(state.agent_counts()).err().unwrap();
    let listed = rt.block_on(state.agents()).err().unwrap();
    assert!(counted.message.starts_with("state of agent `zz` cannot be read"), "{counted}");
    assert_eq!(counted.message, listed.message);
}
