//! The sled backend: the conformance suite with real restarts (the database is closed and
//! reopened), durability across a reopen, records that cannot be decoded, concurrent signers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_state::{AgentId, Decision, DecisionId, DecisionStatus, SignOutcome, Timestamp, encode};
use async_trait::async_trait;
use governance::testing::{GovernanceFactory, run_conformance};
use governance::{DECISIONS_TREE, DecideError, Governance, SledGovernance, SubmitError};
use run_store::{Durability, RunStore};
use tempfile::TempDir;

/// Each `fresh` backend is a new run directory; `reopen` closes its database and opens it again.
struct Sled {
    root: TempDir,
    runs: AtomicUsize,
    /// The run directory of each live backend, by the address of its allocation.
    dirs: Mutex<HashMap<usize, PathBuf>>,
}

impl Sled {
    fn new() -> Self {
        Self {
            root: tempfile::tempdir().unwrap(),
            runs: AtomicUsize::new(0),
            dirs: Mutex::new(HashMap::new()),
        }
    }

    fn open(&self, store: &RunStore) -> Arc<dyn Governance> {
        let gov: Arc<dyn Governance> = Arc::new(SledGovernance::open(store).unwrap());
        self.dirs.lock().unwrap().insert(address(&gov), store.dir().to_path_buf());
        gov
    }
}

fn address(gov: &Arc<dyn Governance>) -> usize {
    Arc::as_ptr(gov).cast::<()>().addr()
}

#[async_trait]
impl GovernanceFactory for Sled {
    async fn fresh(&self) -> Arc<dyn Governance> {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let dir = self.root.path().join(format!("run-{n}"));
        let store =
            RunStore::create(&dir, &format!("run-{n}"), Timestamp(0), Durability::Synced).unwrap();
        self.open(&store)
    }

    async fn reopen(&self, gov: Arc<dyn Governance>) -> Option<Arc<dyn Governance>> {
        let dir = self.dirs.lock().unwrap().remove(&address(&gov)).unwrap();
        // The backend holds the only clone of its store: dropping it closes the database.
        drop(gov);
        wait_for_sled_to_let_go(&dir);
        let store = RunStore::open(&dir, Durability::Synced)
            .unwrap_or_else(|e| panic!("reopen {}: {e}", dir.display()));
        Some(self.open(&store))
    }
}

#[test]
fn sled_backend_passes_the_conformance_suite_with_restarts() {
    run_conformance(Sled::new());
}

/// Blocks until nothing holds the lock on the run's database file, then releases it.
///
/// sled 0.34 closes its file a moment after the last handle drops: a task of its I/O thread pool
/// can still hold it (sled issues #1234 and #1289), so an immediate reopen in the same process
/// can find the lock taken. Waiting on the lock itself, rather than for some time, makes the
/// reopen deterministic; a store that really stayed open would hang here instead of failing.
fn wait_for_sled_to_let_go(dir: &Path) {
    let db = std::fs::File::open(dir.join(run_store::DB_DIR).join("db")).unwrap();
    db.lock().unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).build().unwrap()
}

fn create_run(dir: &Path) -> RunStore {
    RunStore::create(dir, "run-1", Timestamp(0), Durability::Synced).unwrap()
}

/// Opens the run again once the last store on it has closed.
fn reopen_run(dir: &Path) -> RunStore {
    wait_for_sled_to_let_go(dir);
    RunStore::open(dir, Durability::Synced).unwrap()
}

fn decision(n: u128, signers: &[&AgentId], created_at: u64) -> Decision {
    Decision::propose(
        DecisionId::from_u128(n),
        signers[0].clone(),
        serde_json::json!({ "plan": n.to_string(), "weight": 0.25 }),
        signers.iter().map(|s| (*s).clone()).collect(),
        Timestamp(created_at),
    )
    .unwrap()
}

/// Everything a call acknowledged is in the database after it is closed and opened again, and
/// nothing is there twice.
#[test]
fn acknowledged_decisions_survive_closing_and_reopening_the_database() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let rt = runtime();
    let (a, b) = (AgentId::new("top-a"), AgentId::new("top-b"));
    let before = rt.block_on(async {
        let store = create_run(&dir);
        let gov = SledGovernance::open(&store).unwrap();
        gov.submit(decision(1, &[&a, &b], 10)).await.unwrap();
        gov.submit(decision(2, &[&a, &b], 5)).await.unwrap();
        gov.submit(decision(3, &[&a], 7)).await.unwrap();
        assert_eq!(
            gov.sign(DecisionId::from_u128(1), &a, Timestamp(11)).await.unwrap(),
            SignOutcome::Signed
        );
        gov.veto(DecisionId::from_u128(2), &b, "too risky", Timestamp(12)).await.unwrap();
        assert_eq!(
            gov.sign(DecisionId::from_u128(3), &a, Timestamp(13)).await.unwrap(),
            SignOutcome::Approved
        );
        gov.list().await.unwrap()
    });
    assert_eq!(before.iter().map(|d| d.created_at.0).collect::<Vec<_>>(), [5, 7, 10]);

    let store = reopen_run(&dir);
    let gov = SledGovernance::open(&store).unwrap();
    rt.block_on(async {
        assert_eq!(gov.list().await.unwrap(), before);
        let pending: Vec<DecisionId> =
            gov.list_pending().await.unwrap().iter().map(|d| d.id).collect();
        assert_eq!(pending, [DecisionId::from_u128(1)]);
        assert!(matches!(
            gov.submit(decision(1, &[&a], 0)).await,
            Err(SubmitError::DuplicateId { .. })
        ));
        assert_eq!(
            gov.sign(DecisionId::from_u128(1), &b, Timestamp(20)).await.unwrap(),
            SignOutcome::Approved
        );
        let approved = gov.get(DecisionId::from_u128(1)).await.unwrap().unwrap();
        assert_eq!(approved.status, DecisionStatus::Approved);
        assert_eq!(approved.signatures.len(), 2);
    });
}

/// A decision record that cannot be decoded makes `get`, `sign` and `veto` of it fail with a
/// backend error naming the tree and the key, is never overwritten, and leaves every other
/// decision readable; the lists skip it.
#[test]
fn an_undecodable_record_is_reported_by_name_and_the_rest_stays_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let rt = runtime();
    let (a, b) = (AgentId::new("top-a"), AgentId::new("top-b"));
    rt.block_on(async {
        let store = create_run(&dir);
        let gov = SledGovernance::open(&store).unwrap();
        for n in 1..=5 {
            gov.submit(decision(n, &[&a, &b], n as u64)).await.unwrap();
        }
    });

    // Damage records behind the backend's back: garbage, a record of another kind, a record from
    // a future schema, and a well-formed decision stored under another decision's key.
    let key = |n: u128| DecisionId::from_u128(n).to_string();
    let damaged: [(String, Vec<u8>); 4] = [
        (key(1), b"\xff\x00 not a decision".to_vec()),
        (key(2), br#"{"kind":"board","schema_version":1,"value":{}}"#.to_vec()),
        (key(3), br#"{"kind":"decision","schema_version":99,"value":{}}"#.to_vec()),
        (key(4), encode(&decision(9, &[&a], 4)).unwrap()),
    ];
    {
        let store = reopen_run(&dir);
        let tree = store.tree(DECISIONS_TREE).unwrap();
        for (key, bytes) in &damaged {
            tree.insert(key.as_bytes(), bytes.as_slice()).unwrap();
        }
        store.commit_blocking().unwrap();
    }

    let store = reopen_run(&dir);
    let gov = SledGovernance::open(&store).unwrap();
    rt.block_on(async {
        for n in 1..=4 {
            let id = DecisionId::from_u128(n);
            let e = gov.get(id).await.unwrap_err().to_string();
            assert!(
                e.contains(&format!("`{id}`")) && e.contains(&format!("`{DECISIONS_TREE}`")),
                "the error does not name the record: {e}"
            );
            assert!(matches!(gov.sign(id, &a, Timestamp(9)).await, Err(DecideError::Backend(_))));
            assert!(matches!(
                gov.veto(id, &a, "no", Timestamp(9)).await,
                Err(DecideError::Backend(_))
            ));
            assert!(matches!(
                gov.submit(decision(n, &[&a], 0)).await,
                Err(SubmitError::DuplicateId { .. })
            ));
        }

        // The rest reads, lists and signs as before.
        let five = DecisionId::from_u128(5);
        assert_eq!(gov.get(five).await.unwrap().unwrap(), decision(5, &[&a, &b], 5));
        let listed: Vec<DecisionId> = gov.list().await.unwrap().iter().map(|d| d.id).collect();
        assert_eq!(listed, [five]);
        let pending: Vec<DecisionId> =
            gov.list_pending().await.unwrap().iter().map(|d| d.id).collect();
        assert_eq!(pending, [five]);
        assert_eq!(gov.sign(five, &a, Timestamp(10)).await.unwrap(), SignOutcome::Signed);
    });
    let tree = store.tree(DECISIONS_TREE).unwrap();
    for (key, bytes) in &damaged {
        assert_eq!(tree.get(key.as_bytes()).unwrap().as_deref(), Some(bytes.as_slice()), "{key}");
    }
}

/// Every required signer signs at once, from several threads: every signature is kept, exactly
/// one call reports `Approved`, and the result is on disk.
#[test]
fn concurrent_signatures_lose_nothing() {
    const SIGNERS: usize = 8;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let rt = runtime();
    let store = create_run(&dir);
    let gov = Arc::new(SledGovernance::open(&store).unwrap());
    let signers: Vec<AgentId> = (0..SIGNERS).map(|i| AgentId::new(format!("top-{i}"))).collect();
    let id = DecisionId::from_u128(1);
    let outcomes: Vec<SignOutcome> = rt.block_on(async {
        gov.submit(decision(1, &signers.iter().collect::<Vec<_>>(), 0)).await.unwrap();
        let mut tasks = Vec::new();
        for signer in signers.clone() {
            let gov = Arc::clone(&gov);
            tasks.push(tokio::spawn(async move { gov.sign(id, &signer, Timestamp(1)).await }));
        }
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap().unwrap());
        }
        outcomes
    });
    assert_eq!(outcomes.iter().filter(|o| **o == SignOutcome::Approved).count(), 1);
    assert_eq!(outcomes.iter().filter(|o| **o == SignOutcome::Signed).count(), SIGNERS - 1);
    drop(gov);
    drop(store);

    let store = reopen_run(&dir);
    let gov = SledGovernance::open(&store).unwrap();
    let stored = rt.block_on(gov.get(id)).unwrap().unwrap();
    assert_eq!(stored.status, DecisionStatus::Approved);
    assert_eq!(stored.signatures.len(), SIGNERS);
}
