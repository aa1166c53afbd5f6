//! Against the real server at `STRATA_NATS_URL` (default `nats://127.0.0.1:4222`), and a second
//! server without JetStream started here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "tests")]

use async_nats::jetstream::{kv, stream};

use super::*;

#[tokio::test]
async fn names_and_subjects_live_under_the_namespace() {
    let store = NatsStore::connect(&test_url(), "run-1").await.unwrap();
    assert_eq!(store.name("bus"), "strata_run-1_bus");
    assert_eq!(store.subject("bus"), "strata.run-1.bus");
    assert_eq!(store.namespace(), "run-1");
}

#[tokio::test]
async fn a_bad_namespace_is_refused_before_connecting() {
    for bad in ["", "a.b", "a b", "a*", "a_b", "é", &"x".repeat(65)] {
        let err = NatsStore::connect("nats://127.0.0.1:1", bad).await.unwrap_err();
        assert!(matches!(err, NatsError::BadNamespace { .. }), "{bad:?}: {err}");
    }
}

#[tokio::test]
async fn a_server_that_does_not_answer_is_named_in_the_error() {
    // Nothing listens on port 1 of loopback.
    let err = NatsStore::connect("nats://127.0.0.1:1", "x").await.unwrap_err();
    assert!(matches!(err, NatsError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("nats://127.0.0.1:1"), "{err}");
    let err = NatsStore::connect("not a url at all", "x").await.unwrap_err();
    assert!(matches!(err, NatsError::Unreachable { .. }), "{err}");
}

#[tokio::test]
async fn a_server_without_jetstream_is_refused() {
    let server = TestServer::without_jetstream().unwrap();
    let err = NatsStore::connect(&server.url(), "x").await.unwrap_err();
    assert!(matches!(err, NatsError::NoJetStream { .. }), "{err}");
    assert!(err.to_string().contains("-js"), "{err}");
}

#[tokio::test]
async fn streams_and_buckets_are_made_once_and_checked_for_their_schema() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let config = stream::Config {
        subjects: vec![format!("{}.>", store.subject("log"))],
        ..Default::default()
    };
    let made = store.stream("log", config.clone()).await.unwrap();
    assert_eq!(made.cached_info().config.name, store.name("log"));
    // Opening again uses what is there.
    store.stream("log", config.clone()).await.unwrap();
    let bucket = store.bucket("boards", kv::Config::default()).await.unwrap();
    bucket.put("k", "v".into()).await.unwrap();
    let again = store.bucket("boards", kv::Config::default()).await.unwrap();
    assert_eq!(again.get("k").await.unwrap().as_deref(), Some(&b"v"[..]));

    // A stream of the same name made by someone else (or another schema version) is refused,
    // and left as it was.
    let foreign = stream::Config {
        name: store.name("other"),
        description: Some("strata schema 0: other".into()),
        subjects: vec![format!("{}.>", store.subject("other"))],
        ..Default::default()
    };
    store.jetstream().create_stream(foreign).await.unwrap();
    let err = store
        .stream(
            "other",
            stream::Config {
                subjects: vec![format!("{}.>", store.subject("other"))],
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, NatsError::SchemaMismatch { kind: "stream", .. }), "{err}");
    let mut kept = store.jetstream().get_stream(store.name("other")).await.unwrap();
    assert_eq!(
        kept.info().await.unwrap().config.description.as_deref(),
        Some("strata schema 0: other")
    );
    // (A bucket is a stream named `KV_<bucket>`.)
    store
        .jetstream()
        .create_stream(stream::Config {
            name: format!("KV_{}", store.name("oldkv")),
            description: Some("made by hand".into()),
            subjects: vec![format!("$KV.{}.>", store.name("oldkv"))],
            max_messages_per_subject: 1,
            ..Default::default()
        })
        .await
        .unwrap();
    let err = store.bucket("oldkv", kv::Config::default()).await.unwrap_err();
    assert!(matches!(err, NatsError::SchemaMismatch { kind: "bucket", .. }), "{err}");

    assert_eq!(store.delete_namespace().await.unwrap(), 4);
    assert_eq!(store.delete_namespace().await.unwrap(), 0);
}

#[tokio::test]
async fn a_reconnect_is_a_new_connection_to_the_same_namespace() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let bucket = store.bucket("state", kv::Config::default()).await.unwrap();
    bucket.put("a", "1".into()).await.unwrap();
    let again = store.reconnect().await.unwrap();
    assert_eq!(again.namespace(), store.namespace());
    let bucket = again.bucket("state", kv::Config::default()).await.unwrap();
    assert_eq!(bucket.get("a").await.unwrap().as_deref(), Some(&b"1"[..]));
}

/// The key-value and stream operations the backends are built on work against this server
/// (Debian's nats-server is 2.9, older than async-nats's newest requests).
#[tokio::test]
async fn the_server_takes_the_operations_the_backends_use() {
    use futures_util::StreamExt as _;
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let js = store.jetstream();
    let bucket = store.bucket("kv", kv::Config { history: 1, ..Default::default() }).await.unwrap();
    let first = bucket.create("a", "1".into()).await.unwrap();
    assert!(bucket.create("a", "again".into()).await.is_err(), "create is create-only");
    let second = bucket.update("a", "2".into(), first).await.unwrap();
    assert!(bucket.update("a", "stale".into(), first).await.is_err(), "update checks the revision");
    let entry = bucket.entry("a").await.unwrap().unwrap();
    assert_eq!((entry.revision, &entry.value[..]), (second, &b"2"[..]));
    bucket.put("b", "x".into()).await.unwrap();
    bucket.delete("b").await.unwrap();
    // (`keys` and `history` time out on a 2.9 server: the backends list keys through the
    // stream's per-subject counts instead.)
    let kv_stream = js.get_stream(format!("KV_{}", store.name("kv"))).await.unwrap();
    let subjects: Vec<(String, usize)> = kv_stream
        .info_with_subjects(format!("$KV.{}.>", store.name("kv")))
        .await
        .unwrap()
        .map(|s| s.unwrap())
        .collect()
        .await;
    assert_eq!(subjects.len(), 2, "a, and the delete marker of b: {subjects:?}");
    let mut watch = bucket.watch("a").await.unwrap();
    bucket.put("a", "3".into()).await.unwrap();
    let seen = watch.next().await.unwrap().unwrap();
    assert_eq!(&seen.value[..], b"3");

    let subject = store.subject("log");
    let stream = store
        .stream(
            "log",
            stream::Config {
                subjects: vec![format!("{subject}.>")],
                allow_direct: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for i in 0..3 {
        js.publish(format!("{subject}.x"), format!("{i}").into()).await.unwrap().await.unwrap();
    }
    let message =
        stream.direct_get_next_for_subject(format!("{subject}.x"), Some(2)).await.unwrap();
    assert_eq!(&message.payload[..], b"1");
    stream.delete_message(2).await.unwrap();
    let message =
        stream.direct_get_next_for_subject(format!("{subject}.x"), Some(2)).await.unwrap();
    assert_eq!(&message.payload[..], b"2");
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            filter_subject: format!("{subject}.x"),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut batch = consumer.fetch().max_messages(10).messages().await.unwrap();
    let mut payloads = Vec::new();
    while let Some(message) = batch.next().await {
        let message = message.unwrap();
        payloads.push(String::from_utf8(message.payload.to_vec()).unwrap());
        message.ack().await.unwrap();
    }
    assert_eq!(payloads, ["0", "2"]);
}

/// Deleting a namespace leaves the namespaces whose names begin with it.
#[tokio::test]
async fn deleting_a_namespace_leaves_its_neighbours() {
    let namespaces = TestNamespaces::new();
    let base = namespaces.make();
    let store = NatsStore::connect(&test_url(), &base).await.unwrap();
    let longer = store.with_namespace(&format!("{base}-bus")).unwrap();
    // (Not one of `namespaces`: deleted here, or left by a failure before.)
    store.bucket("bus-agents", kv::Config::default()).await.unwrap();
    longer.bucket("agents", kv::Config::default()).await.unwrap();
    assert_ne!(store.name("bus-agents"), longer.name("agents"));
    assert_eq!(store.delete_namespace().await.unwrap(), 1);
    assert_eq!(longer.delete_namespace().await.unwrap(), 1);
}

const TTL: Duration = Duration::from_millis(1000);

/// Two holders on two connections race for the same leases: each lease goes to exactly one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_holders_racing_for_a_lease_never_both_get_it() {
    let namespaces = TestNamespaces::new();
    let one = namespaces.connect().await.unwrap();
    let two = one.reconnect().await.unwrap();
    let (a, b) = (
        Leases::open(&one, "leases", TTL).await.unwrap(),
        Leases::open(&two, "leases", TTL).await.unwrap(),
    );
    for round in 0..20 {
        let key = format!("agent-{round}");
        let (x, y) = tokio::join!(a.acquire(&key, "worker-a"), b.acquire(&key, "worker-b"));
        let (x, y) = (x.unwrap(), y.unwrap());
        assert!(x.is_some() != y.is_some(), "round {round}: exactly one holder: {x:?} {y:?}");
        let winner = x.or(y).unwrap();
        assert_eq!(a.holder(&key).await.unwrap().as_deref(), Some(winner.holder()));
        // The loser cannot take it either, now the race is over.
        let other = if winner.holder() == "worker-a" { ("worker-b", &b) } else { ("worker-a", &a) };
        assert_eq!(other.1.acquire(&key, other.0).await.unwrap(), None);
    }
}

/// A lease renewed stays; one not renewed expires on the server and in its holder's view,
/// another takes it, and the old holder can no longer renew it. A released lease is free at
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_not_renewed_expires_and_its_old_holder_cannot_renew_it() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    let leases = Leases::open(&store, "leases", TTL).await.unwrap();
    let mut held = leases.acquire("top-a", "worker-a").await.unwrap().unwrap();
    for _ in 0..3 {
        tokio::time::sleep(TTL / 2).await;
        assert!(leases.renew(&mut held).await.unwrap(), "renewed in time");
        assert!(held.is_valid());
    }
    assert_eq!(leases.acquire("top-a", "worker-b").await.unwrap(), None, "still held");

    // worker-a stops renewing (killed, or cut off): its own view ends first, then the server's.
    let mut waited = Duration::ZERO;
    let taken = loop {
        if let Some(lease) = leases.acquire("top-a", "worker-b").await.unwrap() {
            break lease;
        }
        assert!(waited < TTL * 10, "the lease never expired on the server");
        tokio::time::sleep(TTL / 10).await;
        waited += TTL / 10;
    };
    assert!(!held.is_valid(), "the old holder's view expired before the server let go");
    assert!(!leases.renew(&mut held).await.unwrap(), "a lease taken over cannot be renewed");
    assert!(!held.is_valid());
    assert_eq!(leases.holder("top-a").await.unwrap().as_deref(), Some("worker-b"));

    // Releasing a lost lease leaves it to its new holder; releasing a held one frees it.
    leases.release(held).await.unwrap();
    assert_eq!(leases.holder("top-a").await.unwrap().as_deref(), Some("worker-b"));
    leases.release(taken).await.unwrap();
    assert_eq!(leases.holder("top-a").await.unwrap(), None);
    assert!(leases.acquire("top-a", "worker-c").await.unwrap().is_some());
}

#[tokio::test]
async fn leases_of_another_time_to_live_or_too_short_are_refused() {
    let namespaces = TestNamespaces::new();
    let store = namespaces.connect().await.unwrap();
    Leases::open(&store, "leases", TTL).await.unwrap();
    let err = Leases::open(&store, "leases", TTL * 2).await.unwrap_err();
    assert!(err.to_string().contains("time to live"), "{err}");
    let err = Leases::open(&store, "other", Duration::from_millis(10)).await.unwrap_err();
    assert!(err.to_string().contains("too short"), "{err}");
}
