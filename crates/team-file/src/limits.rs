//! The limits on team and plan files, and durations: [`check_heartbeat`] and the
//! `"250ms"`/`"4s"`/`"1m"`/`"1h"` form the files use.

use std::time::Duration;

use thiserror::Error;

/// The largest plan file read: 16 MiB.
pub const MAX_PLAN_FILE_BYTES: usize = 16 * 1024 * 1024;
/// The largest team file read: 32 MiB (`strata init --scale 100000` writes about 7 MiB).
pub const MAX_TEAM_FILE_BYTES: usize = 32 * 1024 * 1024;
/// The most steps one plan may have.
pub const MAX_PLAN_STEPS: usize = 10_000;
/// The largest `args` of one step, measured as JSON: 8 MiB. This is the content of one tool
/// call, such as what a `write_file` step writes.
pub const MAX_STEP_ARGS_BYTES: usize = 8 * 1024 * 1024;
/// The longest plan `id`, and the longest step `id`: 128 bytes.
pub const MAX_ID_BYTES: usize = 128;
/// The longest plan `goal` and step `description`: 16 KiB. They are what leads and executors
/// (and their models) are told, not content: content goes in a step's `args`.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;
/// The most bytes of step ids and descriptions in one plan, all steps together: 256 KiB. A
/// lead writes the plan of the steps it is given to its whiteboard, a line each (the step's
/// executor, up to 64 bytes, and its description), and the top power appends each wave's step
/// ids to its own; a board holds at most 1 MiB (`whiteboard::MAX_BOARD_BYTES`). With
/// [`MAX_PLAN_STEPS`] lines of framing this keeps every such board under that limit, so a plan
/// that is read is one the team can hold.
pub const MAX_PLAN_TEXT_BYTES: usize = 256 * 1024;
/// The shortest heartbeat, in the team file or `--heartbeat`: 10 ms.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(10);
/// The longest heartbeat, in the team file or `--heartbeat`: 1 hour.
pub const MAX_HEARTBEAT: Duration = Duration::from_secs(3600);

/// A heartbeat outside [`MIN_HEARTBEAT`] to [`MAX_HEARTBEAT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
#[error(
    "a heartbeat of {} ms is out of range; use 10ms to 1h (such as \"250ms\" or \"4s\")",
    heartbeat.as_millis()
)]
pub struct HeartbeatOutOfRange {
    /// The heartbeat given.
    pub heartbeat: Duration,
}

/// Checks a heartbeat against [`MIN_HEARTBEAT`] and [`MAX_HEARTBEAT`], the range of the team
/// file's `heartbeat` (and of `strata run --heartbeat`); returns it when it is in range.
pub fn check_heartbeat(heartbeat: Duration) -> Result<Duration, HeartbeatOutOfRange> {
    if (MIN_HEARTBEAT..=MAX_HEARTBEAT).contains(&heartbeat) {
        Ok(heartbeat)
    } else {
        Err(HeartbeatOutOfRange { heartbeat })
    }
}

/// Parses `250ms`, `4s`, `1m` or `1h`, above zero: the durations of the team file (its
/// `heartbeat`, an executor's timeouts) and of `strata run --heartbeat`. The error says what
/// is wrong in words, the text quoted.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "`{text}` is not a duration; write a whole number and a unit (ms, s, m or h), such as \"250ms\", \"4s\" or \"1m\""
        )
    };
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let (number, unit) = text.split_at(digits);
    let number: u64 = number.parse().map_err(|_| bad())?;
    let millis = match unit {
        "ms" => Some(number),
        "s" => number.checked_mul(1_000),
        "m" => number.checked_mul(60_000),
        "h" => number.checked_mul(3_600_000),
        _ => None,
    }
    .ok_or_else(bad)?;
    if millis == 0 {
        return Err(format!("`{text}` is no time at all; a duration must be longer than 0"));
    }
    Ok(Duration::from_millis(millis))
}
