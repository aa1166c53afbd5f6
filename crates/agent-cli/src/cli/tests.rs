//! Tests of the command line's own parsing: `--heartbeat` takes the team file's range.
#![allow(clippy::unwrap_used, reason = "tests")]

use team_file::{MAX_HEARTBEAT, MIN_HEARTBEAT};

use super::parse_heartbeat;

/// `--heartbeat` is refused outside 10 ms to 1 h, like a team file's `heartbeat`.
#[test]
fn heartbeat_flag_takes_the_team_file_range() {
    assert_eq!(parse_heartbeat("10ms"), Ok(MIN_HEARTBEAT));
    assert_eq!(parse_heartbeat("60m"), Ok(MAX_HEARTBEAT));
    for bad in ["9ms", "61m", "18446744073709551615s"] {
        let err = parse_heartbeat(bad).unwrap_err();
        assert!(err.contains("out of range; use 10ms to 1h"), "{bad}: {err}");
    }
}
