//! Tests of the command line's own parsing: `--heartbeat` is read as the team file's
//! `heartbeat` is, in its range.
#![allow(clippy::unwrap_used, reason = "tests")]

use team_file::{MAX_HEARTBEAT, MIN_HEARTBEAT};

use super::parse_heartbeat;

/// `--heartbeat` is refused outside 10 ms to 1 h, like a team file's `heartbeat`.
#[test]
fn heartbeat_flag_takes_the_team_file_range() {
    assert_eq!(parse_heartbeat("10ms"), Ok(MIN_HEARTBEAT));
    assert_eq!(parse_heartbeat("60m"), Ok(MAX_HEARTBEAT));
    // Written as the team file writes it: hours too, and the longest heartbeat is 1 h.
    assert_eq!(parse_heartbeat("1h"), Ok(MAX_HEARTBEAT));
    assert_eq!(parse_heartbeat(" 4s "), Ok(std::time::Duration::from_secs(4)));
    for bad in ["9ms", "61m", "2h", "18446744073709551615ms"] {
        let err = parse_heartbeat(bad).unwrap_err();
        assert!(err.contains("out of range; use 10ms to 1h"), "{bad}: {err}");
    }
    // Not a duration at all, as the team file's parser says it.
    for bad in ["4sec", "fast", "18446744073709551615s"] {
        let err = parse_heartbeat(bad).unwrap_err();
        assert!(err.contains("is not a duration; write a whole number and a unit"), "{bad}: {err}");
    }
    assert!(parse_heartbeat("0s").unwrap_err().contains("a duration must be longer than 0"));
}

/// `--base-url` takes an http(s) URL with a host (and a port that is one), as the team file's
/// `base_url`; `--model` a name that is not blank.
#[test]
fn base_url_and_model_flags_take_only_what_can_be_used() {
    for good in [
        "http://127.0.0.1:8080/v1",
        "https://api.openai.com/v1",
        " http://localhost:11434/v1 ",
        "http://[::1]:8000/v1",
        "http://user:pw@10.0.0.5/v1",
    ] {
        assert_eq!(super::parse_base_url(good), Ok(good.trim().to_owned()), "{good}");
    }
    for bad in [
        "",
        "not a url",
        "localhost:8080",
        "ftp://127.0.0.1/v1",
        "http://",
        "http:///v1",
        "http://:8080/v1",
        "http://127.0.0.1:99999/v1",
        "http://127.0.0.1:0/v1",
        "http://[::1/v1",
        "http://host name/v1",
        "http://a\\b/v1",
    ] {
        let err = super::parse_base_url(bad).unwrap_err();
        assert!(err.contains("is not an http(s) URL"), "{bad}: {err}");
    }
    assert_eq!(super::parse_model(" gpt-4o-mini "), Ok("gpt-4o-mini".to_owned()));
    for bad in ["", "   ", "a\nb"] {
        assert!(super::parse_model(bad).is_err(), "{bad:?}");
    }
}
