//! The sled backend: the conformance suite with real restarts (the database is closed and
//! reopened), durability across a reopen, records that cannot be decoded, concurrent writers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use agent_state::{Actor, AgentId, AgentLayer, BoardId, BoardSnapshot, Timestamp, encode};
use async_trait::async_trait;
use run_store::{Durability, RunStore};
use tempfile::TempDir;
use whiteboard::testing::{WhiteboardFactory, run_conformance};
use whiteboard::{BOARDS_TREE, BoardError, CreateError, SledWhiteboard, Whiteboard};

/// Each `fresh` backend is a new run directory; `reopen` closes its database and opens it again.
struct Sled {
    root: TempDir,
    runs: AtomicUsize,
    max_bytes: usize,
    /// The run directory of each live backend, by the address of its allocation.
    dirs: Mutex<HashMap<usize, PathBuf>>,
}

impl Sled {
    fn new(max_bytes: usize) -> Self {
        Self {
            root: tempfile::tempdir().unwrap(),
            runs: AtomicUsize::new(0),
            max_bytes,
            dirs: Mutex::new(HashMap::new()),
        }
    }

    fn open(&self, store: &RunStore) -> Arc<dyn Whiteboard> {
        let boards: Arc<dyn Whiteboard> =
            Arc::new(SledWhiteboard::with_max_bytes(store, self.max_bytes).unwrap());
        self.dirs.lock().unwrap().insert(address(&boards), store.dir().to_path_buf());
        boards
    }
}

fn address(boards: &Arc<dyn Whiteboard>) -> usize {
    Arc::as_ptr(boards).cast::<()>().addr()
}

#[async_trait]
impl WhiteboardFactory for Sled {
    async fn fresh(&self) -> Arc<dyn Whiteboard> {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        let dir = self.root.path().join(format!("run-{n}"));
        let store =
            RunStore::create(&dir, &format!("run-{n}"), Timestamp(0), Durability::Synced).unwrap();
        self.open(&store)
    }

    async fn reopen(&self, boards: Arc<dyn Whiteboard>) -> Option<Arc<dyn Whiteboard>> {
        let dir = self.dirs.lock().unwrap().remove(&address(&boards)).unwrap();
        // The backend holds the only clone of its store: dropping it closes the database.
        drop(boards);
        wait_for_sled_to_let_go(&dir);
        let store = RunStore::open(&dir, Durability::Synced)
            .unwrap_or_else(|e| panic!("reopen {}: {e}", dir.display()));
        Some(self.open(&store))
    }

    fn max_board_bytes(&self) -> usize {
        self.max_bytes
    }
}

#[test]
fn sled_backend_passes_the_conformance_suite_with_restarts() {
    run_conformance(Sled::new(whiteboard::MAX_BOARD_BYTES));
}

#[test]
fn sled_backend_passes_the_conformance_suite_with_a_small_limit() {
    run_conformance(Sled::new(64));
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

fn agent_board(owner: &str) -> BoardId {
    BoardId::Agent(AgentId::new(owner))
}

/// Everything a call acknowledged is in the database after it is closed and opened again, and
/// nothing is there twice: versions go on from where they were.
#[test]
fn acknowledged_changes_survive_closing_and_reopening_the_database() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let rt = runtime();
    let lead = AgentId::new("mid-1");
    let before = rt.block_on(async {
        let store = create_run(&dir);
        let boards = SledWhiteboard::open(&store).unwrap();
        boards.create(&lead, AgentLayer::Mid).await.unwrap();
        assert_eq!(
            boards.write(&lead, &agent_board("mid-1"), "plan".into(), Timestamp(1)).await.unwrap(),
            1
        );
        assert_eq!(
            boards.append(&lead, &agent_board("mid-1"), "step 1", Timestamp(2)).await.unwrap(),
            2
        );
        assert_eq!(boards.append(&lead, &BoardId::Global, "hello", Timestamp(3)).await.unwrap(), 1);
        boards.list(&Actor::System).await.unwrap()
    });
    assert_eq!(before.len(), 2);

    let store = reopen_run(&dir);
    let boards = SledWhiteboard::open(&store).unwrap();
    rt.block_on(async {
        assert_eq!(boards.list(&Actor::System).await.unwrap(), before);
        let board = boards.read(&Actor::from(&lead), &agent_board("mid-1")).await.unwrap();
        assert_eq!(
            board,
            BoardSnapshot {
                board: agent_board("mid-1"),
                layer: Some(AgentLayer::Mid),
                content: "plan\nstep 1".into(),
                version: 2,
                updated_at: Some(Timestamp(2)),
            }
        );
        assert_eq!(
            boards.append(&lead, &agent_board("mid-1"), "step 2", Timestamp(4)).await.unwrap(),
            3
        );
        assert_eq!(boards.append(&lead, &BoardId::Global, "again", Timestamp(5)).await.unwrap(), 2);
    });
}

/// A board record that cannot be decoded makes calls that need it fail with a backend error
/// naming the tree and the key, is never overwritten, and leaves every other board readable;
/// `list` skips it.
#[test]
fn an_undecodable_record_is_reported_by_name_and_the_rest_stays_readable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let rt = runtime();
    rt.block_on(async {
        let store = create_run(&dir);
        let boards = SledWhiteboard::open(&store).unwrap();
        for (name, layer) in [
            ("top-1", AgentLayer::Top),
            ("mid-1", AgentLayer::Mid),
            ("bottom-1", AgentLayer::Bottom),
            ("bottom-2", AgentLayer::Bottom),
        ] {
            let id = AgentId::new(name);
            boards.create(&id, layer).await.unwrap();
            boards
                .write(&id, &agent_board(name), format!("notes of {name}"), Timestamp(1))
                .await
                .unwrap();
        }
        boards
            .append(&AgentId::new("top-1"), &BoardId::Global, "kickoff", Timestamp(2))
            .await
            .unwrap();
    });

    // Damage records behind the backend's back: garbage, a record of another kind, a record from
    // a future schema, and a well-formed board stored under another board's key.
    let garbage: &[u8] = b"\xff\x00 not a board";
    let damaged: [(&str, Vec<u8>); 4] = [
        ("bottom-1", garbage.to_vec()),
        ("mid-1", br#"{"kind":"message","schema_version":1,"value":{}}"#.to_vec()),
        ("global", br#"{"kind":"board","schema_version":99,"value":{}}"#.to_vec()),
        (
            "bottom-2",
            encode(&BoardSnapshot {
                board: agent_board("someone-else"),
                layer: Some(AgentLayer::Bottom),
                content: String::new(),
                version: 0,
                updated_at: None,
            })
            .unwrap(),
        ),
    ];
    {
        let store = reopen_run(&dir);
        let tree = store.tree(BOARDS_TREE).unwrap();
        for (key, bytes) in &damaged {
            tree.insert(key.as_bytes(), bytes.as_slice()).unwrap();
        }
        store.commit_blocking().unwrap();
    }

    let store = reopen_run(&dir);
    let boards = SledWhiteboard::open(&store).unwrap();
    let top = AgentId::new("top-1");
    rt.block_on(async {
        for (key, _) in &damaged {
            let board = if *key == "global" { BoardId::Global } else { agent_board(key) };
            let err = boards.read(&Actor::System, &board).await.unwrap_err();
            let BoardError::Backend(e) = err else { panic!("read {key}: {err:?}") };
            let message = e.to_string();
            assert!(
                message.contains(&format!("`{key}`"))
                    && message.contains(&format!("`{BOARDS_TREE}`")),
                "the error does not name the record: {message}"
            );
        }

        // The rest reads and lists as before; the damaged agent boards are skipped.
        let top_board = boards.read(&Actor::from(&top), &agent_board("top-1")).await.unwrap();
        assert_eq!((top_board.content.as_str(), top_board.version), ("notes of top-1", 1));
        let listed: Vec<String> = boards
            .list(&Actor::System)
            .await
            .unwrap()
            .into_iter()
            .map(|b| b.board.to_string())
            .collect();
        assert_eq!(listed, ["top-1"]);
        assert_eq!(
            boards
                .write(&top, &agent_board("top-1"), "still fine".into(), Timestamp(3))
                .await
                .unwrap(),
            2
        );

        // Calls that need a damaged record fail and do not overwrite it.
        let bottom = AgentId::new("bottom-1");
        assert!(matches!(
            boards.create(&bottom, AgentLayer::Bottom).await,
            Err(CreateError::Backend(_))
        ));
        assert!(matches!(
            boards.write(&bottom, &agent_board("bottom-1"), "overwrite".into(), Timestamp(4)).await,
            Err(BoardError::Backend(_))
        ));
        assert!(matches!(
            boards.read(&Actor::from(&bottom), &BoardId::Global).await,
            Err(BoardError::Backend(_))
        ));
        assert!(matches!(boards.list(&Actor::from(&bottom)).await, Err(BoardError::Backend(_))));
        assert!(matches!(
            boards.append(&top, &BoardId::Global, "more", Timestamp(5)).await,
            Err(BoardError::Backend(_))
        ));
    });
    let tree = store.tree(BOARDS_TREE).unwrap();
    for (key, bytes) in &damaged {
        assert_eq!(tree.get(key.as_bytes()).unwrap().as_deref(), Some(bytes.as_slice()), "{key}");
    }
}

/// Concurrent appends through one backend, on several threads, each get their own version and
/// none is lost: the read-check-write is serialized.
#[test]
fn concurrent_appends_lose_nothing() {
    const WRITERS: usize = 4;
    const EACH: usize = 10;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    let rt = runtime();
    let store = create_run(&dir);
    let boards = Arc::new(SledWhiteboard::open(&store).unwrap());
    let mut versions: Vec<u64> = rt.block_on(async {
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let boards = Arc::clone(&boards);
            tasks.push(tokio::spawn(async move {
                let me = AgentId::new(format!("bottom-{w}"));
                boards.create(&me, AgentLayer::Bottom).await.unwrap();
                let mut versions = Vec::new();
                for i in 0..EACH {
                    let line = format!("{w}:{i}");
                    versions.push(
                        boards.append(&me, &BoardId::Global, &line, Timestamp(1)).await.unwrap(),
                    );
                }
                versions
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    versions.sort_unstable();
    let expected: Vec<u64> = (1..=(WRITERS * EACH) as u64).collect();
    assert_eq!(versions, expected);
    drop(boards);
    drop(store);

    let store = reopen_run(&dir);
    let boards = SledWhiteboard::open(&store).unwrap();
    let global = rt.block_on(boards.read(&Actor::System, &BoardId::Global)).unwrap();
    assert_eq!(global.version, (WRITERS * EACH) as u64);
    let mut lines: Vec<&str> = global.content.lines().collect();
    lines.sort_unstable();
    let mut want: Vec<String> =
        (0..WRITERS).flat_map(|w| (0..EACH).map(move |i| format!("{w}:{i}"))).collect();
    want.sort_unstable();
    assert_eq!(lines, want);
}
