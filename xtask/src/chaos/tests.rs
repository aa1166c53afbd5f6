//! Tests of the chaos harness's scenarios and arguments (no `strata` run).

use super::*;

#[test]
fn ten_seeds_in_a_row_cover_every_kind_and_a_seed_is_the_same_scenario() {
    let kinds: BTreeSet<Fault> = (37..47).map(|s| Scenario::new(s).fault).collect();
    assert_eq!(kinds.len(), KINDS.len());
    let (a, b) = (Scenario::new(12), Scenario::new(12));
    assert_eq!(a.plan(), b.plan());
    assert_eq!(a.team(Some("http://x/v1")), b.team(Some("http://x/v1")));
    assert_eq!(a.faulted, b.faulted);
    assert_eq!(a.moments, b.moments);
}

#[test]
fn seeds_are_read_and_ci_leaves_out_only_the_listed_kinds() -> anyhow::Result<()> {
    assert_eq!(args(&["--seeds", "2", "--start", "8"])?, vec![8, 9]);
    assert_eq!(args(&[])?.len() as u64, DEFAULT_SEEDS);
    assert!(args(&["--seeds", "x"]).is_err());
    let ci = ci_seeds();
    for seed in 0..CI_SEEDS {
        let left_out = CI_LEFT_OUT.iter().any(|(kind, _)| *kind == Scenario::new(seed).fault);
        assert_eq!(ci.contains(&seed), !left_out, "seed {seed}");
    }
    Ok(())
}

/// Sends one chat completion request to `model` and returns the whole answer (status line,
/// headers and body) as the server wrote it before closing or answering in full.
fn ask(model: &model::FakeModel, body: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let url = model.url();
    let address = url.trim_start_matches("http://").trim_end_matches("/v1");
    let mut stream = std::net::TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buffer[..n]);
                // A whole answer (content-length) on a kept-alive connection: stop at its end.
                let text = String::from_utf8_lossy(&answer);
                if let Some((head, body)) = text.split_once("\r\n\r\n")
                    && let Some(length) = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|l| l.trim().parse::<usize>().ok())
                    && body.len() >= length
                {
                    break;
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[test]
fn the_model_misbehaves_on_the_calls_it_was_given_and_answers_the_others() -> anyhow::Result<()> {
    let review = r#"{"model": "fake-model", "messages": [{"role": "user", "content": "review"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "review", "schema": {}}}}"#;
    let streamed = review.replacen('{', r#"{"stream": true, "#, 1);
    let rate_limited = model::FakeModel::start(
        Some(model::ModelFault::RateLimited),
        BTreeSet::from([0]),
        Duration::from_millis(100),
    )?;
    let first = ask(&rate_limited, review)?;
    assert!(first.starts_with("HTTP/1.1 429") && first.contains("retry-after-ms"), "{first}");
    let second = ask(&rate_limited, &streamed)?;
    assert!(second.starts_with("HTTP/1.1 200") && second.contains("text/event-stream"), "{second}");
    assert!(second.contains("\"usage\"") && second.ends_with("data: [DONE]\n\n"), "{second}");
    assert!(second.contains("sign"), "{second}");
    assert_eq!((rate_limited.calls(), rate_limited.injected()), (2, 1));
    let truncated = model::FakeModel::start(
        Some(model::ModelFault::Truncated),
        BTreeSet::from([0]),
        Duration::from_millis(100),
    )?;
    let cut = ask(&truncated, &streamed)?;
    assert!(!cut.contains("[DONE]") && !cut.contains("finish_reason\":\"stop"), "{cut}");
    let garbage = model::FakeModel::start(
        Some(model::ModelFault::Garbage),
        BTreeSet::from([0]),
        Duration::from_millis(100),
    )?;
    let body = ask(&garbage, review)?;
    let (_, json) = body.split_once("\r\n\r\n").unwrap_or_default();
    assert!(serde_json::from_str::<Value>(json).is_err(), "{body}");
    Ok(())
}
