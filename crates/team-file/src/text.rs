//! From bytes to text: [`read`] (the one function that touches the file system), [`decode`]
//! (UTF-8 and the size limit, with the position of the first invalid byte) and
//! [`escape_controls`] (text printed on one line).

use std::borrow::Cow;
use std::io::Read as _;
use std::path::Path;

use agent_state::is_control;

use crate::error::{FileError, ReadError, Source};

/// Reads the team or plan file at `path`: at most `limit` bytes of UTF-8 text
/// ([`MAX_TEAM_FILE_BYTES`](crate::MAX_TEAM_FILE_BYTES) or
/// [`MAX_PLAN_FILE_BYTES`](crate::MAX_PLAN_FILE_BYTES)), checked by [`decode`]. It reads at most
/// `limit + 1` bytes, so a huge file costs no more than the limit. This is the only function of
/// the crate that touches the file system.
pub fn read(path: &Path, limit: usize) -> Result<String, ReadError> {
    let io = |source| ReadError::Io { path: path.to_path_buf(), source };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    let most = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    file.take(most).read_to_end(&mut bytes).map_err(io)?;
    Ok(decode(path, bytes, limit)?)
}

/// The text of a team or plan file read as `bytes` (the caller reads at most `limit + 1`):
/// refused when not UTF-8, pointing at the first invalid byte, or over `limit` bytes,
/// pointing at where the limit is passed. `path` is used only in messages.
pub fn decode(path: &Path, bytes: Vec<u8>, limit: usize) -> Result<String, FileError> {
    let head = &bytes[..bytes.len().min(limit)];
    if let Err(e) = std::str::from_utf8(head) {
        // A character cut by the limit is not an encoding error; the size error follows.
        if e.error_len().is_some() || bytes.len() <= limit {
            let at = e.valid_up_to();
            let text = String::from_utf8_lossy(&head[..at]);
            let byte = head.get(at).copied().unwrap_or_default();
            return Err(Source { path, text: &text }.error(
                at..at,
                format!(
                    "the file is not UTF-8 text: byte 0x{byte:02X} at byte offset {at} cannot \
                     start or continue a character; save the file as UTF-8"
                ),
            ));
        }
    }
    if bytes.len() > limit {
        let text = String::from_utf8_lossy(head);
        return Err(Source { path, text: &text }.error(
            limit..limit,
            format!(
                "the file is over the limit of {limit} bytes; the limit is passed here: make the \
                 file smaller"
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        // Unreachable after the checks above; reported like them all the same.
        let at = e.utf8_error().valid_up_to();
        FileError {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            message: format!("the file is not UTF-8 text (byte offset {at}); save it as UTF-8"),
        }
    })
}

/// `text` with control characters escaped so it prints as one line: `\n`, `\r`, `\t`, and
/// `\u{..}` for the others (see [`agent_state::find_control`]).
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if is_control(c) => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}
