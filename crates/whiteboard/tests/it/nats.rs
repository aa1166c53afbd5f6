//! The NATS backend against the real server at `STRATA_NATS_URL` (default
//! `nats://127.0.0.1:4222`): the conformance suite with restarts (a restart is a new connection),
//! races between two connections, refused calls that write nothing, the size limit and the
//! server's `max_payload`, records that cannot be decoded, and a bucket of another schema. Every
//! test deletes the namespaces it made.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use agent_state::{Actor, AgentId, AgentLayer, BoardId, Timestamp};
use async_trait::async_trait;
use nats_store::testing::{bucket_description, make_foreign_bucket};
use nats_store::{NatsError, NatsStore, TestNamespaces, test_url};
use whiteboard::testing::{WhiteboardFactory, run_conformance};
use whiteboard::{BOARDS_BUCKET, BoardError, CreateError, NatsWhiteboard, Whiteboard};

/// The limit [`NatsWhiteboard::open`] gives on the test server, read on a connection of its own.
fn default_limit() -> usize {
    std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let store = NatsStore::connect(&test_url(), "limit").await.unwrap();
            whiteboard::MAX_BOARD_BYTES.min(NatsWhiteboard::largest_max_bytes(&store))
        })
    })
    .join()
    .unwrap()
}

/// Each `fresh` backend is a new namespace on its own connection; `reopen` drops the backend,
/// and with it its connection, and connects again to the same namespace.
struct Nats {
    max_bytes: usize,
    namespaces: TestNamespaces,
    /// The namespace of each live backend, by the address of its allocation.
    live: Mutex<HashMap<usize, String>>,
}

impl Nats {
    fn new(max_bytes: usize) -> Self {
        Self { max_bytes, namespaces: TestNamespaces::new(), live: Mutex::new(HashMap::new()) }
    }

    async fn open(&self, namespace: &str) -> Arc<dyn Whiteboard> {
        let store = NatsStore::connect(&test_url(), namespace).await.unwrap();
        let boards: Arc<dyn Whiteboard> =
            Arc::new(NatsWhiteboard::with_max_bytes(&store, self.max_bytes).await.unwrap());
        self.live.lock().unwrap().insert(address(&boards), namespace.to_owned());
        boards
    }
}

fn address(boards: &Arc<dyn Whiteboard>) -> usize {
    Arc::as_ptr(boards).cast::<()>().addr()
}

#[async_trait]
impl WhiteboardFactory for Nats {
    async fn fresh(&self) -> Arc<dyn Whiteboard> {
        let namespace = self.namespaces.make();
        self.open(&namespace).await
    }

    async fn reopen(&self, boards: Arc<dyn Whiteboard>) -> Option<Arc<dyn Whiteboard>> {
        let namespace = self.live.lock().unwrap().remove(&address(&boards)).unwrap();
        // The suite passes its only handle: dropping it closes the old connection.
        drop(boards);
        Some(self.open(&namespace).await)
    }

    fn max_board_bytes(&self) -> usize {
        self.max_bytes
    }
}

#[test]
fn nats_backend_passes_the_conformance_suite_with_restarts() {
    run_conformance(Nats::new(default_limit()));
}

#[test]
fn nats_backend_passes_the_conformance_suite_with_a_small_limit() {
    run_conformance(Nats::new(64));
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build().unwrap()
}

/// Two connections to one new namespace, each with its own backend: two processes of a team.
async fn two_processes(
    namespaces: &TestNamespaces,
) -> (NatsStore, Arc<NatsWhiteboard>, Arc<NatsWhiteboard>) {
    let namespace = namespaces.make();
    let one = NatsStore::connect(&test_url(), &namespace).await.unwrap();
    let two = NatsStore::connect(&test_url(), &namespace).await.unwrap();
    let boards_one = Arc::new(NatsWhiteboard::open(&one).await.unwrap());
    let boards_two = Arc::new(NatsWhiteboard::open(&two).await.unwrap());
    (one, boards_one, boards_two)
}

/// The last sequence of the bucket's stream: it moves on every write, so an unchanged sequence
/// proves nothing was written.
async fn last_sequence(store: &NatsStore) -> u64 {
    let name = format!("KV_{}", store.name(BOARDS_BUCKET));
    let mut stream = store.jetstream().get_stream(name).await.unwrap();
    stream.info().await.unwrap().state.last_sequence
}

/// Many agents append to the global board at once, half through each connection: every append
/// gets its own version and every line is there once. One agent's board written through both
/// connections at once: every write gets its own version and the board holds the write with the
/// highest. The same board created through both at once under different layers: one layer wins
/// and the other call is told so.
#[test]
fn two_connections_never_overwrite_each_other() {
    const WRITERS: usize = 16;
    const ROUNDS: usize = 3;
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let (_store, one, two) = two_processes(&namespaces).await;
        let via = |i: usize| if i.is_multiple_of(2) { Arc::clone(&one) } else { Arc::clone(&two) };

        // Concurrent appends to the global board.
        let writers: Vec<AgentId> =
            (0..WRITERS).map(|i| AgentId::new(format!("bottom-{i}"))).collect();
        for (i, writer) in writers.iter().enumerate() {
            via(i).create(writer, AgentLayer::Bottom).await.unwrap();
        }
        let tasks: Vec<_> = (0..WRITERS * ROUNDS)
            .map(|k| {
                let (boards, writer) = (via(k), writers[k % WRITERS].clone());
                tokio::spawn(async move {
                    let line = format!("line {k} by {writer}");
                    boards.append(&writer, &BoardId::Global, &line, Timestamp(1)).await
                })
            })
            .collect();
        let mut versions = BTreeSet::new();
        for task in tasks {
            assert!(versions.insert(task.await.unwrap().unwrap()), "two appends got one version");
        }
        let total = u64::try_from(WRITERS * ROUNDS).unwrap();
        assert_eq!(versions, (1..=total).collect::<BTreeSet<u64>>());
        let global = two.read(&Actor::System, &BoardId::Global).await.unwrap();
        assert_eq!(global.version, total);
        let mut lines: Vec<&str> = global.content.lines().collect();
        lines.sort_unstable();
        let mut want: Vec<String> = (0..WRITERS * ROUNDS)
            .map(|k| format!("line {k} by {}", writers[k % WRITERS]))
            .collect();
        want.sort_unstable();
        assert_eq!(lines, want, "every append once");

        // Concurrent writes to one board, from both connections.
        let me = AgentId::new("mid-1");
        one.create(&me, AgentLayer::Mid).await.unwrap();
        let tasks: Vec<_> = (0..WRITERS)
            .map(|k| {
                let (boards, me) = (via(k), me.clone());
                tokio::spawn(async move {
                    let content = format!("draft {k}");
                    let version =
                        boards.write(&me, &BoardId::from(&me), content.clone(), Timestamp(2)).await;
                    (version.unwrap(), content)
                })
            })
            .collect();
        let mut written = HashMap::new();
        for task in tasks {
            let (version, content) = task.await.unwrap();
            assert!(written.insert(version, content).is_none(), "two writes got one version");
        }
        let last = u64::try_from(WRITERS).unwrap();
        assert_eq!(written.keys().copied().collect::<BTreeSet<u64>>(), (1..=last).collect());
        let mine = one.read(&Actor::System, &BoardId::from(&me)).await.unwrap();
        assert_eq!((mine.version, &mine.content), (last, &written[&last]));

        // Concurrent creates of one board under different layers.
        for n in 0..8 {
            let owner = AgentId::new(format!("new-{n}"));
            let (o1, o2) = (owner.clone(), owner.clone());
            let (b1, b2) = (via(0), via(1));
            let top = tokio::spawn(async move { b1.create(&o1, AgentLayer::Top).await });
            let bottom = tokio::spawn(async move { b2.create(&o2, AgentLayer::Bottom).await });
            let (top, bottom) = (top.await.unwrap(), bottom.await.unwrap());
            let stored = one.read(&Actor::System, &BoardId::from(&owner)).await.unwrap();
            match (top, bottom) {
                (Ok(board), Err(CreateError::LayerMismatch { existing, requested, .. })) => {
                    assert_eq!((existing, requested), (AgentLayer::Top, AgentLayer::Bottom));
                    assert_eq!(board, stored);
                }
                (Err(CreateError::LayerMismatch { existing, requested, .. }), Ok(board)) => {
                    assert_eq!((existing, requested), (AgentLayer::Bottom, AgentLayer::Top));
                    assert_eq!(board, stored);
                }
                other => panic!("{owner}: both or neither created it: {other:?}"),
            }
        }
    });
}

/// Refused calls, and creating an existing board again, write nothing to the bucket.
#[test]
fn refused_calls_write_nothing() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let namespace = namespaces.make();
        let store = NatsStore::connect(&test_url(), &namespace).await.unwrap();
        let boards = NatsWhiteboard::with_max_bytes(&store, 64).await.unwrap();
        let (top, bottom) = (AgentId::new("top-1"), AgentId::new("bottom-1"));
        boards.create(&top, AgentLayer::Top).await.unwrap();
        boards.create(&bottom, AgentLayer::Bottom).await.unwrap();
        boards.write(&bottom, &BoardId::from(&bottom), "mine".into(), Timestamp(1)).await.unwrap();
        boards.append(&top, &BoardId::Global, "hello", Timestamp(2)).await.unwrap();
        let before = boards.list(&Actor::System).await.unwrap();
        let sequence = last_sequence(&store).await;

        let at = Timestamp(3);
        assert_eq!(boards.create(&bottom, AgentLayer::Bottom).await.unwrap(), before[1]);
        assert!(matches!(
            boards.create(&bottom, AgentLayer::Top).await,
            Err(CreateError::LayerMismatch { .. })
        ));
        for invalid in ["", "global", "system", "no spaces", "a.b"] {
            assert!(matches!(
                boards.create(&AgentId::new(invalid), AgentLayer::Top).await,
                Err(CreateError::InvalidOwner { .. })
            ));
        }
        assert!(matches!(
            boards.write(&top, &BoardId::from(&bottom), "theirs".into(), at).await,
            Err(BoardError::PermissionDenied { .. })
        ));
        assert!(matches!(
            boards.write(&top, &BoardId::Global, "all".into(), at).await,
            Err(BoardError::PermissionDenied { .. })
        ));
        assert!(matches!(
            boards.read(&Actor::from(&bottom), &BoardId::from(&top)).await,
            Err(BoardError::PermissionDenied { .. })
        ));
        assert!(matches!(
            boards.write(&bottom, &BoardId::from(&bottom), "x".repeat(65), at).await,
            Err(BoardError::TooLarge { size: 65, limit: 64, .. })
        ));
        assert!(matches!(
            boards.append(&top, &BoardId::Global, &"y".repeat(59), at).await,
            Err(BoardError::TooLarge { size: 65, limit: 64, .. })
        ));
        let ghost = AgentId::new("ghost-1");
        assert!(matches!(
            boards.append(&ghost, &BoardId::Global, "boo", at).await,
            Err(BoardError::UnknownActor { .. })
        ));
        assert!(matches!(
            boards.write(&top, &BoardId::from(&ghost), "boo".into(), at).await,
            Err(BoardError::UnknownBoard { .. })
        ));
        // Ids that are no key of the bucket are unknown, not a failed request.
        let odd = AgentId::new("no.such agent*");
        assert!(matches!(
            boards.list(&Actor::from(&odd)).await,
            Err(BoardError::UnknownActor { .. })
        ));
        assert!(matches!(
            boards.read(&Actor::System, &BoardId::from(&odd)).await,
            Err(BoardError::UnknownBoard { .. })
        ));
        // `global` is the global board's key, but no agent.
        let global_agent = AgentId::new("global");
        assert!(matches!(
            boards.read(&Actor::System, &BoardId::from(&global_agent)).await,
            Err(BoardError::UnknownBoard { .. })
        ));
        assert!(matches!(
            boards.append(&global_agent, &BoardId::Global, "boo", at).await,
            Err(BoardError::UnknownActor { .. })
        ));

        assert_eq!(last_sequence(&store).await, sequence, "a refused call wrote to the bucket");
        assert_eq!(boards.list(&Actor::System).await.unwrap(), before);
    });
}

/// A board of exactly the limit fits in one message of the server whatever its content (no
/// escaping grows it), survives a reconnect, and a limit the server's `max_payload` cannot hold
/// is refused before anything is made.
#[test]
fn the_limit_follows_the_servers_max_payload() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let namespace = namespaces.make();
        let store = NatsStore::connect(&test_url(), &namespace).await.unwrap();
        let largest = NatsWhiteboard::largest_max_bytes(&store);
        assert_eq!(largest, store.client().max_payload() - whiteboard::RECORD_HEADROOM);
        let err = NatsWhiteboard::with_max_bytes(&store, largest + 1).await.unwrap_err();
        assert!(err.to_string().contains("max_payload"), "{err}");
        assert_eq!(store.delete_namespace().await.unwrap(), 0, "nothing was made");

        let boards = NatsWhiteboard::open(&store).await.unwrap();
        assert_eq!(boards.max_bytes(), whiteboard::MAX_BOARD_BYTES.min(largest));
        let limit = boards.max_bytes();
        let me = AgentId::new(format!("m{}", "x".repeat(63)));
        boards.create(&me, AgentLayer::Mid).await.unwrap();
        // Quotes, backslashes, newlines and control characters: JSON would write each in two
        // to six bytes.
        let unit = "\"\\\n\u{1}";
        let mut full = unit.repeat(limit / unit.len());
        full.push_str(&"\u{2}".repeat(limit - full.len()));
        assert_eq!(full.len(), limit);
        let board = BoardId::from(&me);
        assert_eq!(boards.write(&me, &board, full.clone(), Timestamp(u64::MAX)).await.unwrap(), 1);

        let again = NatsWhiteboard::open(&store.reconnect().await.unwrap()).await.unwrap();
        let seen = again.read(&Actor::System, &board).await.unwrap();
        assert_eq!((seen.content == full, seen.version), (true, 1));
        assert!(matches!(
            again.append(&me, &board, "", Timestamp(1)).await,
            Err(BoardError::TooLarge { .. })
        ));
    });
}

/// A record that cannot be decoded makes every call that needs it fail with a backend error
/// naming the bucket and the key, is never overwritten, and leaves the rest readable; `list`
/// skips it.
#[test]
fn an_undecodable_record_is_reported_by_name_and_the_rest_stays_readable() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let namespace = namespaces.make();
        let store = NatsStore::connect(&test_url(), &namespace).await.unwrap();
        let boards = NatsWhiteboard::open(&store).await.unwrap();
        for (name, layer) in [("mid-1", AgentLayer::Mid), ("mid-2", AgentLayer::Mid)] {
            boards.create(&AgentId::new(name), layer).await.unwrap();
        }
        let bucket = store.jetstream().get_key_value(store.name(BOARDS_BUCKET)).await.unwrap();
        let damaged: [(&str, &[u8]); 4] = [
            ("mid-1", b"\xff\x00 not a board"),
            ("bottom-9", b"{\"kind\":\"board\",\"schema_version\":99,\"value\":{}}\n"),
            (
                "top-9",
                b"{\"kind\":\"board\",\"schema_version\":1,\"value\":{\"board\":\"top-8\",\"layer\":\"top\",\"content\":\"\",\"version\":0,\"updated_at\":null}}\n",
            ),
            ("global", b"no header line"),
        ];
        for (key, bytes) in damaged {
            bucket.put(key, bytes.to_vec().into()).await.unwrap();
        }
        let name = store.name(BOARDS_BUCKET);
        let at = Timestamp(5);
        for (key, _) in damaged {
            let board = if key == "global" { BoardId::Global } else { BoardId::from(&AgentId::new(key)) };
            let e = boards.read(&Actor::System, &board).await.unwrap_err();
            assert!(matches!(e, BoardError::Backend(_)), "{e}");
            let e = e.to_string();
            assert!(
                e.contains(&format!("`{key}`")) && e.contains(&format!("`{name}`")),
                "the error does not name the record: {e}"
            );
            let mid2 = AgentId::new("mid-2");
            assert!(matches!(
                boards.append(&mid2, &board, "x", at).await,
                Err(BoardError::Backend(_))
            ));
            if key != "global" {
                let owner = AgentId::new(key);
                assert!(matches!(
                    boards.create(&owner, AgentLayer::Mid).await,
                    Err(CreateError::Backend(_))
                ));
                assert!(matches!(
                    boards.list(&Actor::from(&owner)).await,
                    Err(BoardError::Backend(_))
                ));
            }
        }
        let listed = boards.list(&Actor::System).await.unwrap();
        let listed: Vec<&str> = listed.iter().map(|b| b.board.as_str()).collect();
        assert_eq!(listed, ["mid-2"]);
        let mid2 = AgentId::new("mid-2");
        assert_eq!(boards.write(&mid2, &BoardId::from(&mid2), "ok".into(), at).await.unwrap(), 1);
        for (key, bytes) in damaged {
            assert_eq!(bucket.get(key).await.unwrap().as_deref(), Some(bytes), "{key}");
        }
    });
}

/// A bucket of the same name made by another schema version is refused and left as it was.
#[test]
fn a_bucket_of_another_schema_is_refused() {
    let namespaces = TestNamespaces::new();
    runtime().block_on(async {
        let store = NatsStore::connect(&test_url(), &namespaces.make()).await.unwrap();
        make_foreign_bucket(&store, BOARDS_BUCKET).await.unwrap();
        let err = NatsWhiteboard::open(&store).await.unwrap_err();
        assert!(matches!(err, NatsError::SchemaMismatch { kind: "bucket", .. }), "{err}");
        assert_eq!(
            bucket_description(&store, BOARDS_BUCKET).await.unwrap().as_deref(),
            Some("strata schema 0: boards")
        );
    });
}
