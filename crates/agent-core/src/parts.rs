//! A layer's saved state cut into parts, so that a save writes only the parts that changed.
//!
//! A lead's state holds an entry per step it placed and per result it received, and a tool
//! loop's history an entry per call: saved whole after every turn, the record grows with the
//! team and with the loop, and every turn rewrites all of it. Instead, a store that
//! [keeps parts](crate::StateStore::keeps_parts) is handed only what changed since the agent's
//! last save ([`BehaviorDelta`]): the state is cut into [`split`] parts, each a JSON value under
//! a path, and [`Saved::plan`] compares their hashes with the ones saved last.
//!
//! A container is cut into its children when it is larger than [`PART_BYTES`] (encoded), so
//! small values stay whole and a growing map or list gets one part per entry: a new entry is a
//! new part, the others are not written again.
//!
//! Paths: object keys escaped as in a JSON pointer (`~0`, `~1`), list items as `~i` and their
//! index, each after a `/`; the whole value is the path `""`.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A container whose encoding is larger than this many bytes is saved as one part per child.
pub const PART_BYTES: usize = 1024;

/// Containers nested deeper than this are kept whole (a bound on the paths' length).
const MAX_DEPTH: usize = 24;

/// One change of a saved layer state: the part at `path` set to `value`, or removed (`None`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PartChange {
    /// Where the part is (see the [module docs](self)).
    pub path: String,
    /// Its new value; `None` removes it.
    pub value: Option<Value>,
}

/// What changed in an agent's layer state since its last save: applied to the parts already
/// stored (or, with `replace`, to none), it gives the state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BehaviorDelta {
    /// The stored parts are not used: the state is these changes alone (the first save of an
    /// agent, or after it was restored).
    #[serde(default)]
    pub replace: bool,
    /// The changed parts, by path.
    pub changes: Vec<PartChange>,
}

/// A layer state that its parts do not rebuild (stored parts damaged or mixed up).
#[derive(Debug, thiserror::Error)]
#[error("the saved parts of a layer's state do not fit together at `{path}`")]
pub struct PartsError {
    /// The part that did not fit.
    pub path: String,
}

/// Cuts `value` into parts: (path, value, its encoding's hash), by path.
pub fn split(value: &Value) -> Vec<(String, &Value, u64)> {
    let mut out = Vec::new();
    split_into(value, String::new(), 0, &mut out);
    out
}

/// Cuts `value` (at `path`) into `out`; returns its encoded size.
fn split_into<'v>(
    value: &'v Value,
    path: String,
    depth: usize,
    out: &mut Vec<(String, &'v Value, u64)>,
) -> usize {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(map) if !map.is_empty() && depth < MAX_DEPTH => {
            map.iter().map(|(k, v)| (format!("{path}/{}", escape(k)), v)).collect()
        }
        Value::Array(items) if !items.is_empty() && depth < MAX_DEPTH => {
            items.iter().enumerate().map(|(i, v)| (format!("{path}/~i{i}"), v)).collect()
        }
        _ => return leaf(value, path, out),
    };
    let start = out.len();
    let mut size = 2;
    for (child_path, child) in children {
        size += split_into(child, child_path, depth + 1, out) + 1;
    }
    if size <= PART_BYTES {
        // Small enough to stay whole: its children's parts become one.
        out.truncate(start);
        return leaf(value, path, out);
    }
    size
}

fn leaf<'v>(value: &'v Value, path: String, out: &mut Vec<(String, &'v Value, u64)>) -> usize {
    // Encoding a `Value` cannot fail (its keys are strings).
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    out.push((path, value, hash_bytes(&bytes)));
    bytes.len()
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn unescape(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

/// Rebuilds a layer state from its parts (by path, as [`split`] cut them). No parts: `null`.
pub fn assemble(parts: BTreeMap<String, Value>) -> Result<Value, PartsError> {
    let mut root: Option<Value> = None;
    for (path, value) in parts {
        if path.is_empty() {
            root = Some(value);
            continue;
        }
        let node = root.get_or_insert_with(|| container_for(&path));
        place(node, &path, value)?;
    }
    Ok(finish(root.unwrap_or(Value::Null)))
}

/// An empty container of the kind the first segment of `path` is in.
fn container_for(path: &str) -> Value {
    if path.strip_prefix('/').unwrap_or(path).starts_with("~i") {
        Value::Object(serde_json::Map::from_iter([(
            LIST.to_owned(),
            Value::Object(Default::default()),
        )]))
    } else {
        Value::Object(serde_json::Map::new())
    }
}

/// Lists are rebuilt in a marked object keyed by index, turned into lists by [`finish`].
const LIST: &str = "\u{0}list";

fn place(node: &mut Value, path: &str, value: Value) -> Result<(), PartsError> {
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    place_at(node, &segments, value).ok_or_else(|| PartsError { path: path.to_owned() })
}

/// Puts `value` at `segments` below `node`; `None` if it does not fit there.
fn place_at(node: &mut Value, segments: &[&str], value: Value) -> Option<()> {
    let (segment, rest) = segments.split_first()?;
    let Value::Object(map) = node else { return None };
    let (map, key) = match segment.strip_prefix("~i") {
        Some(index) => {
            let index: usize = index.parse().ok()?;
            match map.get_mut(LIST) {
                Some(Value::Object(items)) => (items, format!("{index:020}")),
                _ => return None,
            }
        }
        None if map.contains_key(LIST) => return None,
        None => (map, unescape(segment)),
    };
    match rest.first() {
        None => {
            map.insert(key, value);
            Some(())
        }
        Some(next) => {
            let child = map.entry(key).or_insert_with(|| container_for(next));
            place_at(child, rest, value)
        }
    }
}

/// Turns the marked objects of [`place`] back into lists.
fn finish(value: Value) -> Value {
    match value {
        Value::Object(mut map) => match map.remove(LIST) {
            Some(Value::Object(items)) => {
                // Keyed by zero-padded index: sorted, they are in order.
                let mut items: Vec<(String, Value)> = items.into_iter().collect();
                items.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Array(items.into_iter().map(|(_, v)| finish(v)).collect())
            }
            _ => Value::Object(map.into_iter().map(|(k, v)| (k, finish(v))).collect()),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(finish).collect()),
        other => other,
    }
}

/// Applies `delta` to `parts` (the stored parts of one agent, by path).
pub fn apply(parts: &mut BTreeMap<String, Value>, delta: &BehaviorDelta) {
    if delta.replace {
        parts.clear();
    }
    for change in &delta.changes {
        match &change.value {
            Some(value) => {
                parts.insert(change.path.clone(), value.clone());
            }
            None => {
                parts.remove(&change.path);
            }
        }
    }
}

/// What an agent saved last, so that its next save writes only what changed: nothing yet
/// (in this process), a record with its state whole (a hash of both), or a record and the
/// hashes of its state's parts (by path).
#[derive(Debug, Default)]
pub enum Saved {
    /// Nothing saved since the agent was made or restored: the next save replaces every part.
    #[default]
    Unknown,
    /// A record with its state inline: the hash of its fields and state.
    Inline(u64),
    /// A record with its state in parts: the hash of its fields, and each part's hash.
    Parts(Box<(u64, BTreeMap<String, u64>)>),
}

/// What one save writes: the record's state inline, or the delta of its parts.
#[derive(Debug)]
pub struct SavePlan {
    /// The state whole (`null` when it goes in parts).
    pub behavior: Value,
    /// What changed in its parts.
    pub parts: Option<BehaviorDelta>,
    /// What is saved once the record is stored ([`Saved`] after it).
    pub next: Saved,
}

impl Saved {
    /// What to write for a record whose other fields hash to `head` and whose layer state is
    /// `state`; `None` if nothing changed since this save. A state that is one small part goes
    /// inline; a larger one as what changed in its parts (all of them, replacing what is
    /// stored, after [`Saved::Unknown`] or an inline save).
    pub fn plan(&self, head: u64, state: &Value) -> Option<SavePlan> {
        let now = split(state);
        if let [(path, value, hash)] = now.as_slice()
            && path.is_empty()
        {
            let combined = mix(head, *hash);
            if matches!(self, Self::Inline(h) if *h == combined) {
                return None;
            }
            let next = Self::Inline(combined);
            return Some(SavePlan { behavior: (*value).clone(), parts: None, next });
        }
        let hashes: BTreeMap<String, u64> = now.iter().map(|(p, _, h)| (p.clone(), *h)).collect();
        let before = match self {
            Self::Parts(saved) => Some(&saved.1),
            Self::Unknown | Self::Inline(_) => None,
        };
        let mut changes: Vec<PartChange> = now
            .into_iter()
            .filter(|(path, _, hash)| before.is_none_or(|b| b.get(path) != Some(hash)))
            .map(|(path, v, _)| PartChange { path, value: Some(v.clone()) })
            .collect();
        if let Some(before) = before {
            let gone = before.keys().filter(|path| !hashes.contains_key(*path));
            changes.extend(gone.map(|path| PartChange { path: path.clone(), value: None }));
            if changes.is_empty() && matches!(self, Self::Parts(saved) if saved.0 == head) {
                return None;
            }
        }
        let delta = BehaviorDelta { replace: before.is_none(), changes };
        let next = Self::Parts(Box::new((head, hashes)));
        Some(SavePlan { behavior: Value::Null, parts: Some(delta), next })
    }
}

/// The hash of `bytes`.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

fn mix(a: u64, b: u64) -> u64 {
    let mut hasher = DefaultHasher::new();
    (a, b).hash(&mut hasher);
    hasher.finish()
}
