//! Integration tests of run directories: creating, opening, refusing, sealing and committing.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod anchor;
mod commit;
mod damage;
mod lock;
mod open;
mod read_only;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agent_state::Timestamp;
use run_store::{Durability, RunStore};

/// A new run `run` inside a fresh temporary directory.
fn new_run(durability: Durability) -> (tempfile::TempDir, PathBuf, RunStore) {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let store = RunStore::create(&run, "run-1", Timestamp(7), durability).unwrap();
    (tmp, run, store)
}

/// Every file under `dir` with its bytes: equal snapshots mean byte-identical directories.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                files.insert(path.strip_prefix(dir).unwrap().to_path_buf(), b"<dir>".to_vec());
                pending.push(path);
            } else {
                files.insert(
                    path.strip_prefix(dir).unwrap().to_path_buf(),
                    std::fs::read(&path).unwrap(),
                );
            }
        }
    }
    files
}

/// `n` records of about 200 bytes in tree `records`, committed.
fn write_records(store: &RunStore, n: u32) {
    let tree = store.tree("records").unwrap();
    for i in 0..n {
        tree.insert(i.to_be_bytes(), record(i)).unwrap();
    }
    store.commit_blocking().unwrap();
}

fn record(i: u32) -> Vec<u8> {
    let mut value = format!("record {i} ").into_bytes();
    value.resize(200, b'.');
    value
}

/// How many of the records `0..n` are missing or wrong.
fn missing_records(store: &RunStore, n: u32) -> usize {
    let tree = store.tree("records").unwrap();
    (0..n)
        .filter(|i| tree.get(i.to_be_bytes()).unwrap().as_deref() != Some(&record(*i)[..]))
        .count()
}

/// The events logged while `f` runs on this thread, as `LEVEL message fields`.
fn logged<T>(f: impl FnOnce() -> T) -> (T, Vec<String>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let value = tracing::subscriber::with_default(Capture(events.clone()), f);
    let events = events.lock().unwrap().clone();
    (value, events)
}

/// A minimal tracing subscriber that records events (tracing-subscriber is not a dependency).
struct Capture(Arc<Mutex<Vec<String>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        write!(self.0, " {}={value:?}", field.name()).unwrap();
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(event.metadata().level().to_string());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}
