//! The event-stream reader: the format's rules, and the same events whatever the chunk
//! boundaries.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use proptest::prelude::*;

use super::{MAX_EVENT_BYTES, SseEvent, SseParser};

fn event(name: Option<&str>, data: &str) -> SseEvent {
    SseEvent { event: name.map(str::to_owned), data: data.to_owned() }
}

/// Every event of `stream` fed in one piece.
fn whole(stream: &[u8]) -> Result<Vec<SseEvent>, String> {
    let mut parser = SseParser::default();
    let mut events = parser.feed(stream)?;
    events.extend(parser.finish()?);
    Ok(events)
}

/// Every event of `stream` fed in pieces cut at `cuts`.
fn pieces(stream: &[u8], cuts: &[usize]) -> Result<Vec<SseEvent>, String> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
    cuts.sort_unstable();
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    let mut start = 0;
    for cut in cuts.into_iter().chain([stream.len()]) {
        events.extend(parser.feed(&stream[start..cut])?);
        start = cut;
    }
    events.extend(parser.finish()?);
    Ok(events)
}

#[test]
fn reads_openai_style_data_lines_and_done() {
    let stream = b"data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n";
    assert_eq!(
        whole(stream).unwrap(),
        vec![event(None, "{\"a\":1}"), event(None, "{\"a\":2}"), event(None, "[DONE]")]
    );
}

#[test]
fn reads_named_events_comments_and_every_line_ending() {
    let stream =
        b": keep-alive\r\nevent: message_start\r\ndata: {}\r\n\r\nevent: ping\rdata: x\r\rdata:no-space\n\n";
    assert_eq!(
        whole(stream).unwrap(),
        vec![event(Some("message_start"), "{}"), event(Some("ping"), "x"), event(None, "no-space")]
    );
}

#[test]
fn joins_data_lines_and_skips_events_without_data() {
    let stream = b"data: one\ndata\ndata:  two\nid: 7\nretry: 10\n\nevent: empty\n\n";
    assert_eq!(whole(stream).unwrap(), vec![event(None, "one\n\n two")]);
}

#[test]
fn a_last_event_without_an_empty_line_is_still_read() {
    assert_eq!(whole(b"data: last").unwrap(), vec![event(None, "last")]);
    assert_eq!(whole(b"data: last\n").unwrap(), vec![event(None, "last")]);
    assert_eq!(whole(b"").unwrap(), vec![]);
}

#[test]
fn a_line_that_is_not_utf8_is_an_error() {
    let error = whole(b"data: \xff\xfe\n\n").unwrap_err();
    assert!(error.contains("not UTF-8"), "{error}");
}

#[test]
fn an_endless_line_is_an_error_not_memory() {
    let mut parser = SseParser::default();
    let chunk = vec![b'a'; 1024 * 1024];
    let mut failed = None;
    for _ in 0..=(MAX_EVENT_BYTES / chunk.len()) {
        if let Err(e) = parser.feed(&chunk) {
            failed = Some(e);
            break;
        }
    }
    let error = failed.expect("an endless line is refused");
    assert!(error.contains("more than"), "{error}");
}

/// Streams of events with multibyte text, CR, LF and CRLF endings, comments and named events.
fn streams() -> impl Strategy<Value = Vec<u8>> {
    let line_end = prop_oneof![Just("\n"), Just("\r\n"), Just("\r")];
    let data = "[a-z0-9{}\":, é€😀]{0,12}";
    let line = prop_oneof![
        (data, line_end.clone()).prop_map(|(d, e)| format!("data: {d}{e}")),
        ("[a-z_]{1,8}", line_end.clone()).prop_map(|(n, e)| format!("event: {n}{e}")),
        (data, line_end.clone()).prop_map(|(c, e)| format!(":{c}{e}")),
        line_end.prop_map(str::to_owned),
    ];
    prop::collection::vec(line, 0..24).prop_map(|lines| lines.concat().into_bytes())
}

proptest! {
    /// Where the chunks of a stream are cut (inside a CRLF, a line, a UTF-8 character) does not
    /// change the events read.
    #[test]
    fn chunk_boundaries_do_not_matter(
        stream in streams(),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        prop_assert_eq!(pieces(&stream, &cuts).unwrap(), whole(&stream).unwrap());
    }
}
