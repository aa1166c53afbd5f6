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
