//! Group commit: many writers share syncs, data committed survives a reopen, both durability
//! modes and both ways of waiting work.

use std::task::{Context, Poll, Waker};

use run_store::{Durability, RunStore};

use crate::{logged, new_run};

const WRITERS: u32 = 64;
const PER_WRITER: u32 = 100;

fn key(writer: u32, i: u32) -> [u8; 8] {
    let mut key = [0; 8];
    key[..4].copy_from_slice(&writer.to_be_bytes());
    key[4..].copy_from_slice(&i.to_be_bytes());
    key
}

/// Every writer's records in tree `w`, or the first one missing.
fn check_all(store: &RunStore, writers: u32, per_writer: u32) {
    let tree = store.tree("w").unwrap();
    for writer in 0..writers {
        for i in 0..per_writer {
            let value = tree.get(key(writer, i)).unwrap();
            assert_eq!(value.as_deref(), Some(&key(writer, i)[..]), "writer {writer} record {i}");
        }
    }
}

#[test]
fn concurrent_async_writers_share_syncs_and_all_data_survives_reopen() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(4).build().unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let store = store.clone();
                tokio::spawn(async move {
                    let tree = store.tree("w").unwrap();
                    for i in 0..PER_WRITER {
                        tree.insert(key(writer, i), &key(writer, i)).unwrap();
                        store.commit().await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    let commits = u64::from(WRITERS * PER_WRITER);
    let syncs = store.syncs();
    assert!(syncs >= 1 && syncs < commits, "{syncs} syncs for {commits} commits");
    drop(store);

    let store = RunStore::open(&run, Durability::Synced).unwrap();
    check_all(&store, WRITERS, PER_WRITER);
}

#[test]
fn commit_blocking_from_plain_threads() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    std::thread::scope(|scope| {
        for writer in 0..8 {
            let store = &store;
            scope.spawn(move || {
                let tree = store.tree("w").unwrap();
                for i in 0..50 {
                    tree.insert(key(writer, i), &key(writer, i)).unwrap();
                    store.commit_blocking().unwrap();
                }
            });
        }
    });
    assert!(store.syncs() <= 400);
    drop(store);
    check_all(&RunStore::open(&run, Durability::Synced).unwrap(), 8, 50);
}

#[test]
fn a_commit_with_nothing_written_returns() {
    let (_tmp, _run, store) = new_run(Durability::Synced);
    store.commit_blocking().unwrap();
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.commit())
        .unwrap();
    assert!(store.syncs() >= 1);
}

/// A commit future dropped before it finished leaves the store working (cancel safety).
#[test]
fn a_cancelled_commit_does_not_disturb_later_ones() {
    let (_tmp, run, store) = new_run(Durability::Synced);
    store.tree("w").unwrap().insert(key(0, 0), &key(0, 0)).unwrap();
    {
        let mut commit = std::pin::pin!(store.commit());
        // One poll takes a ticket; then the future is dropped, whatever the poll said.
        let _ = commit.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    }
    store.tree("w").unwrap().insert(key(0, 1), &key(0, 1)).unwrap();
    store.commit_blocking().unwrap();
    drop(store);
    check_all(&RunStore::open(&run, Durability::Synced).unwrap(), 1, 2);
}

#[test]
fn no_sync_is_announced_with_a_warning_and_still_commits() {
    let ((_tmp, run, store), events) = logged(|| new_run(Durability::NoSync));
    assert!(
        events.iter().any(|e| e.starts_with("WARN") && e.contains("durability NoSync (opt-in)")),
        "{events:?}"
    );
    assert_eq!(store.durability(), Durability::NoSync);
    std::thread::scope(|scope| {
        for writer in 0..4 {
            let store = &store;
            scope.spawn(move || {
                let tree = store.tree("w").unwrap();
                for i in 0..20 {
                    tree.insert(key(writer, i), &key(writer, i)).unwrap();
                    store.commit_blocking().unwrap();
                }
            });
        }
    });
    drop(store);
    let (store, events) = logged(|| RunStore::open(&run, Durability::NoSync).unwrap());
    assert!(events.iter().any(|e| e.contains("NoSync")), "{events:?}");
    check_all(&store, 4, 20);
}

#[test]
fn synced_mode_logs_no_durability_warning() {
    let (_, events) = logged(|| new_run(Durability::Synced));
    assert!(!events.iter().any(|e| e.starts_with("WARN")), "{events:?}");
}

#[test]
fn a_commit_polled_by_hand_completes() {
    // Pending or ready after the first poll (the waker is a no-op), ready in the end.
    let (_tmp, _run, store) = new_run(Durability::Synced);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut commit = std::pin::pin!(store.commit());
    match commit.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(result) => result.unwrap(),
        Poll::Pending => runtime.block_on(commit).unwrap(),
    }
}
