//! The server's pure parts: the token check and where a request's token is read.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use super::*;

fn app(token: &str) -> App {
    App {
        data: PathBuf::from("D"),
        server: None,
        placed: std::sync::Mutex::default(),
        token: token.to_owned(),
        local: "127.0.0.1:7878".parse().unwrap(),
        watches: watch::Watches::new(reader::reader()),
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

fn request(uri: &str, headers: &[(header::HeaderName, &str)]) -> Request {
    let mut b = axum::http::Request::builder().uri(uri);
    for (name, value) in headers {
        b = b.header(name, *value);
    }
    b.body(axum::body::Body::empty()).unwrap()
}

#[test]
fn the_token_comes_from_the_header_the_cookie_or_the_query_of_a_first_load() {
    let auth = |v| request("/api/runs", &[(header::AUTHORIZATION, v)]);
    assert_eq!(header_token(&auth("Bearer abc")), Some("abc"));
    assert_eq!(header_token(&auth("Basic abc")), None);
    assert_eq!(header_token(&request("/x?token=t1", &[])), None, "never from the query");
    let r = request("/", &[(header::COOKIE, "a=1; strata_token_7878=t%2B1; strata_token_9=x")]);
    assert_eq!(cookie_token(&r, "strata_token_7878"), Some("t%2B1"));
    assert_eq!(cookie_token(&r, "strata_token_78"), None, "another server's cookie");
    assert_eq!(
        query_token(Some("after=3&token=t%2B1&run=x")),
        Some(("t+1".to_owned(), "after=3&run=x".to_owned()))
    );
    assert_eq!(query_token(Some("after=3")), None);
    assert_eq!(query_token(None), None);
}

#[test]
fn tokens_round_trip_through_the_url() {
    for token in ["abc", "a b&c=d/é%", "t0k"] {
        assert_eq!(query_unescape(&query_escape(token)).as_deref(), Some(token));
    }
    assert_eq!(url("127.0.0.1:7878".parse().unwrap(), "a&b"), "http://127.0.0.1:7878/?token=a%26b");
    assert_eq!(query_unescape("%zz"), None);
    assert_eq!(html_escape(r#"<a href="x">'&"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
}

#[test]
fn only_this_servers_own_addresses_are_accepted_as_host() {
    let local: SocketAddr = "127.0.0.1:7878".parse().unwrap();
    for host in
        ["127.0.0.1:7878", "localhost:7878", "LOCALHOST:7878", "[::1]:7878", "127.0.0.2:7878"]
    {
        assert!(host_ok(local, host), "{host}");
    }
    for host in [
        "evil.example:7878",
        "127.0.0.1.nip.io:7878",
        "127.0.0.1:7879",
        "127.0.0.1",
        "localhost",
        "192.168.1.5:7878",
        "[::1]",
        "[::1:7878",
        "",
    ] {
        assert!(!host_ok(local, host), "{host}");
    }
    let wide: SocketAddr = "0.0.0.0:80".parse().unwrap();
    assert!(host_ok(wide, "192.168.1.5"), "any address of this machine, port 80 implied");
    assert!(!host_ok(wide, "rebound.example"));
    let lan: SocketAddr = "192.168.1.5:7878".parse().unwrap();
    assert!(host_ok(lan, "192.168.1.5:7878"));
    assert!(!host_ok(lan, "192.168.1.6:7878"));
}
