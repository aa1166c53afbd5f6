//! Encodings the crates share: the canonical JSON text hashed and compared, lowercase hex, a
//! SHA-256 in hex, and text shortened to a bound with `…`. One definition each, so that the
//! bytes a hash covers are the same wherever it is computed.

use std::fmt::Write as _;

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The JSON text of `value` with every object's keys sorted and no white space: two values
/// equal as data have the same canonical text, whatever the order their keys were written in
/// and whatever map type serde_json was built with. Genome ids and tool-call fingerprints are
/// hashes of this text, so it must never change (a test pins it).
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// `bytes` as lowercase hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The SHA-256 of `bytes`, as 64 lowercase hex digits.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// At most `max` characters of `text`, then `…` when it was longer (so a cut text has
/// `max + 1` characters).
pub fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// At most `max` bytes of `text`, cut at a character boundary, then `…` when it was longer.
pub fn shorten_bytes(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
