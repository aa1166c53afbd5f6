//! `encode`/`decode` and the `Stored` envelope.

use std::fmt::Debug;

use serde_json::Value;

use super::wire::{
    sample_board, sample_config, sample_decision, sample_message, sample_metrics, sample_record,
};
use crate::{
    AgentConfig, AgentMetrics, BackendError, BoardSnapshot, Decision, DecodeError, Message, Stored,
    TransitionRecord, Versioned, decode, encode,
};

/// Encodes, checks the envelope fields, decodes, and compares.
#[track_caller]
fn check_stored<T: Versioned + PartialEq + Debug + Clone>(value: &T) {
    let bytes = encode(value).unwrap();
    let envelope: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(envelope["kind"], T::KIND);
    assert_eq!(envelope["schema_version"], T::VERSION);
    assert_eq!(&decode::<T>(&bytes).unwrap(), value);
    // `Stored::new` is the same envelope.
    let stored = Stored::new(value.clone());
    assert_eq!((stored.kind.as_str(), stored.schema_version), (T::KIND, T::VERSION));
    assert_eq!(serde_json::to_vec(&stored).unwrap(), bytes);
    let back: Stored<T> = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(&back.value, value);
}

#[test]
fn every_stored_type_round_trips_through_the_envelope() {
    check_stored(&sample_record());
    check_stored(&sample_config());
    check_stored(&sample_message(false));
    check_stored(&sample_message(true));
    check_stored(&sample_decision());
    check_stored(&sample_metrics());
    check_stored(&AgentMetrics::default());
    check_stored(&sample_board());
}

#[test]
fn kinds_are_distinct_and_versions_are_one() {
    let kinds = [
        (TransitionRecord::KIND, TransitionRecord::VERSION),
        (AgentConfig::KIND, AgentConfig::VERSION),
        (Message::KIND, Message::VERSION),
        (Decision::KIND, Decision::VERSION),
        (AgentMetrics::KIND, AgentMetrics::VERSION),
        (BoardSnapshot::KIND, BoardSnapshot::VERSION),
    ];
    for (i, (kind, version)) in kinds.iter().enumerate() {
        assert_eq!(*version, 1, "{kind}");
        assert!(kinds[..i].iter().all(|(k, _)| k != kind), "duplicate kind {kind}");
    }
}

/// `bytes` with the envelope's `field` replaced by `value`.
fn with_field(bytes: &[u8], field: &str, value: Value) -> Vec<u8> {
    let mut envelope: Value = serde_json::from_slice(bytes).unwrap();
    envelope[field] = value;
    serde_json::to_vec(&envelope).unwrap()
}

#[test]
fn another_schema_version_is_incompatible() {
    let bytes = encode(&sample_message(false)).unwrap();
    for found in [0, 2, u32::MAX] {
        let err =
            decode::<Message>(&with_field(&bytes, "schema_version", found.into())).unwrap_err();
        assert!(
            matches!(
                err,
                DecodeError::IncompatibleVersion { kind: "message", found: f, supported: 1 }
                    if f == found
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("schema version {found}")) && msg.contains("reads version 1")
        );
    }
}

#[test]
fn another_kind_is_refused() {
    let bytes = encode(&sample_message(false)).unwrap();
    let err = decode::<Decision>(&bytes).unwrap_err();
    assert!(
        matches!(&err, DecodeError::WrongKind { found, expected: "decision" } if found == "message"),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "stored record is a message, expected a decision");

    let renamed = with_field(&encode(&sample_metrics()).unwrap(), "kind", "agent_metric".into());
    assert!(matches!(decode::<AgentMetrics>(&renamed), Err(DecodeError::WrongKind { .. })));
}

#[test]
fn garbage_and_truncated_bytes_are_malformed() {
    let bytes = encode(&sample_decision()).unwrap();
    let cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"not json".to_vec(),
        b"\xff\xfe\x00".to_vec(),
        b"[1,2,3]".to_vec(),
        b"{}".to_vec(),
        br#"{"kind":"decision"}"#.to_vec(),
        br#"{"kind":"decision","schema_version":"1","value":{}}"#.to_vec(),
        bytes[..bytes.len() / 2].to_vec(),
        bytes[..bytes.len() - 1].to_vec(),
        // A valid header around a value of the wrong shape.
        with_field(&bytes, "value", Value::from("a decision")),
        with_field(&bytes, "value", serde_json::json!({"id": 1})),
    ];
    for case in cases {
        let err = decode::<Decision>(&case).unwrap_err();
        assert!(
            matches!(err, DecodeError::Malformed { expected_kind: "decision", .. }),
            "{:?} gave {err:?}",
            String::from_utf8_lossy(&case)
        );
        assert!(err.to_string().starts_with("stored decision record is not valid JSON"), "{err}");
    }
}

#[test]
fn backend_error_keeps_backend_message_and_source() {
    use std::error::Error as _;
    let plain = BackendError::new("sled", "disk full");
    assert_eq!(plain.to_string(), "sled backend: disk full");
    assert!(plain.source().is_none());
    let io = std::io::Error::other("broken pipe");
    let wrapped = BackendError::with_source("nats", "publish failed", io);
    assert_eq!(wrapped.to_string(), "nats backend: publish failed");
    assert_eq!(wrapped.source().map(|s| s.to_string()).as_deref(), Some("broken pipe"));
}

/// Regression: serde_json writes NaN and infinities as `null`, so `encode` accepted a metrics
/// record with a non-finite average that `decode` then refused: the record was lost. Whatever
/// `encode` accepts, `decode` must read back.
#[test]
fn encode_refuses_a_non_finite_float_that_decode_could_not_read() {
    for avg in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let m = AgentMetrics { average_task_duration_ms: avg, ..AgentMetrics::default() };
        let err = encode(&m).unwrap_err();
        assert_eq!(err.kind, "agent_metrics");
        assert!(err.to_string().starts_with("cannot encode agent_metrics record: "), "{err}");
    }
}

/// Regression: without serde_json's `float_roundtrip` a stored f64 could read back one ulp off
/// (this value did), so a decoded record differed from the one encoded.
#[test]
fn floats_read_back_bit_for_bit() {
    for avg in [9_343_350.544_652_281, 0.1, 1.0 / 3.0, f64::MAX, f64::MIN_POSITIVE, 5e-324] {
        let m = AgentMetrics { average_task_duration_ms: avg, ..AgentMetrics::default() };
        let back = decode::<AgentMetrics>(&encode(&m).unwrap()).unwrap();
        assert_eq!(back.average_task_duration_ms.to_bits(), avg.to_bits(), "{avg}");
    }
}
