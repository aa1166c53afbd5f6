//! Server-sent events (`text/event-stream`), the format both HTTP providers stream answers in,
//! read incrementally: bytes in as they arrive, whole events out, whatever the chunk
//! boundaries (a line, a CRLF or a UTF-8 character may be cut anywhere).
//!
//! What is read, after the WHATWG rules: lines end in CRLF, LF or CR; an empty line ends an
//! event; a line starting with `:` is a comment; `field: value` (one space after the colon
//! dropped, a line without a colon is a field with an empty value); `data` lines are joined with
//! `\n`; `event` names the event; `id` and `retry` are ignored; an event without data is not
//! dispatched. At the end of the stream a last event not followed by an empty line is still
//! dispatched (servers that close right after their last `data:` line exist). An event larger
//! than [`MAX_EVENT_BYTES`], or a line that is not UTF-8, is an error.

/// Largest event (its data and its pending line) read; more is an error rather than memory
/// spent on a server that never ends a line.
pub(crate) const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// One event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// Its `event` field, if it had one.
    pub(crate) event: Option<String>,
    /// Its `data` lines, joined with `\n`.
    pub(crate) data: String,
}

/// An incremental reader of an event stream: [`feed`](Self::feed) the bytes as they come,
/// [`finish`](Self::finish) at the end.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The last byte fed was a CR: an LF right after it ends nothing more.
    after_cr: bool,
    /// The current event's `event` field.
    event: Option<String>,
    /// The current event's data, each line followed by `\n`.
    data: String,
    /// Whether the current event has a `data` line (it may be empty).
    has_data: bool,
}

impl SseParser {
    /// The events that `bytes` complete, in order.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut events = Vec::new();
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, byte == b'\r');
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => self.end_line(&mut events)?,
                _ => {
                    self.line.push(byte);
                    if self.line.len() + self.data.len() > MAX_EVENT_BYTES {
                        return Err(format!("an event of more than {MAX_EVENT_BYTES} bytes"));
                    }
                }
            }
        }
        Ok(events)
    }

    /// The events left at the end of the stream: a last line and event not ended by an empty
    /// line.
    pub(crate) fn finish(&mut self) -> Result<Vec<SseEvent>, String> {
        let mut events = Vec::new();
        if !self.line.is_empty() {
            self.end_line(&mut events)?;
        }
        self.dispatch(&mut events);
        Ok(events)
    }

    /// The current line is complete: act on it.
    fn end_line(&mut self, events: &mut Vec<SseEvent>) -> Result<(), String> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch(events);
            return Ok(());
        }
        let line =
            String::from_utf8(line).map_err(|e| format!("a line that is not UTF-8 ({e})"))?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_str(), ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            _ => {}
        }
        Ok(())
    }

    /// Ends the current event: dispatched if it has data.
    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let event = self.event.take();
        let mut data = std::mem::take(&mut self.data);
        if std::mem::take(&mut self.has_data) {
            data.pop(); // the last line's `\n`
            events.push(SseEvent { event, data });
        }
    }
}

#[cfg(test)]
mod tests;
