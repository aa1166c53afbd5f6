//! The run id rule: what every store accepts, and the refusals that name it.

use crate::{RUN_ID_RULE, RunId, RunIdError};

#[test]
fn the_rule_takes_letters_digits_and_dashes_up_to_64_bytes() {
    for good in ["a", "run-1", "Fix-Bug-20260101-120000-ab12", "-", &"x".repeat(64)] {
        let id = RunId::parse(good).unwrap();
        assert_eq!(id.as_str(), good);
        assert_eq!(id.to_string(), good);
    }
    let hex = RunId::hex(0xab);
    assert_eq!(hex.as_str(), "000000000000000000000000000000ab");
    assert_eq!(RunId::parse(&hex), Ok(hex));
}

#[test]
fn what_any_backend_refuses_is_refused_with_the_rule_in_the_message() {
    assert_eq!(RunId::parse(""), Err(RunIdError::Empty));
    assert!(matches!(RunId::parse(&"x".repeat(65)), Err(RunIdError::TooLong { len: 65, .. })));
    // `_` makes two runs' NATS streams meet, `.` splits a subject, the rest names no file.
    for (bad, found) in [
        ("a_b", '_'),
        ("a.b", '.'),
        ("..", '.'),
        ("a/b", '/'),
        ("a b", ' '),
        ("é", 'é'),
        ("a>", '>'),
    ] {
        let err = RunId::parse(bad).unwrap_err();
        assert_eq!(err, RunIdError::BadCharacter { id: bad.escape_debug().to_string(), found });
        assert!(err.to_string().contains(RUN_ID_RULE), "{err}");
    }
    assert!(RunIdError::Empty.to_string().contains(RUN_ID_RULE));
}

#[test]
fn deserialising_checks_the_rule_and_serialising_is_the_plain_string() {
    let id: RunId = serde_json::from_str("\"run-7\"").unwrap();
    assert_eq!(serde_json::to_string(&id).unwrap(), "\"run-7\"");
    let err = serde_json::from_str::<RunId>("\"run_7\"").unwrap_err();
    assert!(err.to_string().contains("cannot be a run id"), "{err}");
}
