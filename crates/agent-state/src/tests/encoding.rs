//! The shared encodings: the canonical JSON text pinned byte for byte (genome ids and call
//! fingerprints hash it), hex, and the two shorteners.

use serde_json::json;

use crate::encoding::{canonical_json, hex, sha256_hex, shorten, shorten_bytes};

#[test]
fn the_canonical_json_text_is_pinned() {
    let value: serde_json::Value = serde_json::from_str(
        r#"{ "z": [3, {"b": true, "a": null}], "a": "é \"q\"\n", "m": {"y": -1.5, "x": 10},
            "e": [], "o": {} }"#,
    )
    .unwrap();
    assert_eq!(
        canonical_json(&value),
        r#"{"a":"é \"q\"\n","e":[],"m":{"x":10,"y":-1.5},"o":{},"z":[3,{"a":null,"b":true}]}"#
    );
    assert_eq!(canonical_json(&json!("plain")), r#""plain""#);
    assert_eq!(canonical_json(&json!(null)), "null");
}

#[test]
fn the_canonical_json_of_values_equal_as_data_is_the_same_and_reads_back() {
    let a = json!({"path": "a.txt", "content": {"x": 1, "y": [1, {"b": 2, "a": 1}]}});
    let b: serde_json::Value = serde_json::from_str(
        r#"{"content": {"y": [1, {"a": 1, "b": 2}], "x": 1}, "path": "a.txt"}"#,
    )
    .unwrap();
    assert_eq!(canonical_json(&a), canonical_json(&b));
    assert_eq!(serde_json::from_str::<serde_json::Value>(&canonical_json(&a)).unwrap(), a);
}

#[test]
fn hex_is_lowercase_two_digits_a_byte() {
    assert_eq!(hex(&[]), "");
    assert_eq!(hex(&[0x00, 0x0f, 0xa0, 0xff]), "000fa0ff");
    assert_eq!(
        sha256_hex(b"abc"),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn shorten_keeps_max_characters_and_marks_the_cut() {
    assert_eq!(shorten("short", 5), "short");
    assert_eq!(shorten("longer", 5), "longe…");
    assert_eq!(shorten("ééééé!", 5), "ééééé…");
    assert_eq!(shorten("anything", 0), "…");
    assert_eq!(shorten("", 0), "");
}

#[test]
fn shorten_bytes_cuts_at_a_character_boundary_and_marks_the_cut() {
    assert_eq!(shorten_bytes("abcd", 4), "abcd");
    assert_eq!(shorten_bytes("abcde", 4), "abcd…");
    // `é` is two bytes: a cut inside it falls back to the boundary before it.
    assert_eq!(shorten_bytes("aéb", 2), "a…");
    assert_eq!(shorten_bytes("aéb", 3), "aé…");
    assert_eq!(shorten_bytes("abc", 0), "…");
}
