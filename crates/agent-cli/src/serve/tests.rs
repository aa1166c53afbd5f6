//! The server's pure parts: the token check and where a request's token is read.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use super::*;

fn app(token: &str) -> App {
    App {
        data: PathBuf::from("D"),
        nats: None,
        token: token.to_owned(),
        loopback: true,
        watches: watch::Watches::default(),
        stopping: tokio::sync::watch::Sender::new(false),
    }
}

#[test]
fn the_token_must_match_exactly() {
    let app = app("s3cret");
    assert!(token_ok(&app, Some("s3cret")));
    assert!(!token_ok(&app, Some("s3cre")));
    assert!(!token_ok(&app, Some("s3cretX")));
    assert!(!token_ok(&app, Some("")));
    assert!(!token_ok(&app, None));
}

#[test]
fn the_token_comes_from_the_header_or_the_query() {
    let request = |uri: &str, auth: Option<&str>| {
        let mut b = axum::http::Request::builder().uri(uri);
        if let Some(auth) = auth {
            b = b.header(header::AUTHORIZATION, auth);
        }
        b.body(axum::body::Body::empty()).unwrap()
    };
    assert_eq!(request_token(&request("/api/runs", Some("Bearer abc"))).as_deref(), Some("abc"));
    assert_eq!(request_token(&request("/api/runs", Some("Basic abc"))), None);
    assert_eq!(request_token(&request("/x?after=3&token=t1", None)).as_deref(), Some("t1"));
    assert_eq!(request_token(&request("/x", None)), None);
}
