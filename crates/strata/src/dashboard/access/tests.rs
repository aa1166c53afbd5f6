//! Tests of the access rules: the token check, where a request's token is read, the `Host`
//! check, and what each kind of request is answered.
#![allow(clippy::unwrap_used, reason = "tests")]

use super::*;

fn access(token: &str) -> Access {
    Access::new(token.to_owned(), "127.0.0.1:7878".parse().unwrap())
}

#[test]
fn the_token_must_match_exactly() {
    let access = access("s3cret");
    assert!(access.token_ok(Some("s3cret")));
    assert!(!access.token_ok(Some("s3cre")));
    assert!(!access.token_ok(Some("s3cretX")));
    assert!(!access.token_ok(Some("")));
    assert!(!access.token_ok(None));
}

#[test]
fn the_token_comes_from_the_header_the_cookie_or_the_query_of_a_first_load() {
    assert_eq!(header_token("Bearer abc"), Some("abc"));
    assert_eq!(header_token("Basic abc"), None);
    let cookies = ["a=1; strata_token_7878=t%2B1; strata_token_9=x"];
    assert_eq!(cookie_token(cookies, "strata_token_7878"), Some("t%2B1"));
    assert_eq!(cookie_token(cookies, "strata_token_78"), None, "another server's cookie");
    assert_eq!(cookie_token(["a=1", "strata_token_7878=z"], "strata_token_7878"), Some("z"));
    assert_eq!(
        query_token(Some("after=3&token=t%2B1&run=x")),
        Some(("t+1".to_owned(), "after=3&run=x".to_owned()))
    );
    assert_eq!(query_token(Some("after=3")), None);
    assert_eq!(query_token(None), None);
}

#[test]
fn the_url_to_open_carries_the_token_escaped() {
    let access = access("a&b");
    assert_eq!(access.url(), "http://127.0.0.1:7878/?token=a%26b");
    assert_eq!(access.cookie_name(), "strata_token_7878");
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

/// A read of `path` (with `query`) on the right host.
fn read<'a>(path: &'a str, query: Option<&'a str>) -> Asked<'a> {
    Asked { reading: true, path, query, host: Some("127.0.0.1:7878"), ..Asked::default() }
}

fn refusal_of(verdict: &Verdict) -> Option<Refusal> {
    match verdict {
        Verdict::Refused { refusal, .. } => Some(*refusal),
        _ => None,
    }
}

#[test]
fn reads_take_the_header_or_the_cookie_and_signing_the_header_only() {
    let access = access("t+1");
    let bearer = Asked { authorization: Some("Bearer t+1"), ..read("/api/runs", None) };
    assert_eq!(access.check(&bearer), Verdict::Pass);
    let cookie = Asked { cookies: vec!["strata_token_7878=t%2B1"], ..read("/", None) };
    assert_eq!(access.check(&cookie), Verdict::Pass);
    let wrong = Asked { cookies: vec!["strata_token_7878=t"], ..read("/", None) };
    assert_eq!(refusal_of(&access.check(&wrong)), Some(Refusal::NoToken { page: true }));
    let api = read("/api/runs", None);
    assert_eq!(refusal_of(&access.check(&api)), Some(Refusal::NoToken { page: false }));

    let sign = |asked: Asked<'static>| Asked { reading: false, ..asked };
    let by_cookie =
        sign(Asked { cookies: vec!["strata_token_7878=t%2B1"], ..read("/api/x", None) });
    let Verdict::Refused { refusal, message } = access.check(&by_cookie) else {
        panic!("a cookie alone signs nothing")
    };
    assert_eq!(refusal, Refusal::NoToken { page: false });
    assert!(message.contains("a cookie alone is not enough"), "{message}");
    let by_header = sign(Asked { authorization: Some("Bearer t+1"), ..read("/api/x", None) });
    assert_eq!(access.check(&by_header), Verdict::Pass);
    let in_url = sign(read("/api/x", Some("token=t%2B1")));
    assert_eq!(refusal_of(&access.check(&in_url)), Some(Refusal::TokenInUrl));
}

#[test]
fn a_first_load_sets_the_cookie_and_drops_the_token_from_the_url() {
    let access = access("t+1");
    assert_eq!(
        access.check(&read("/", Some("token=t%2B1&run=r"))),
        Verdict::Redirect {
            location: "/?run=r".to_owned(),
            cookie: "strata_token_7878=t%2B1; Path=/; HttpOnly; SameSite=Strict".to_owned(),
        }
    );
    let Verdict::Refused { refusal, message } = access.check(&read("/", Some("token=x"))) else {
        panic!("a wrong token in the URL")
    };
    assert_eq!(refusal, Refusal::NoToken { page: true });
    assert!(message.starts_with("the token in the URL is not this server's: open the URL"));
}

#[test]
fn a_request_for_another_host_is_refused_whatever_its_token() {
    let access = access("t");
    for host in [Some("evil.example:7878"), None] {
        let asked = Asked { host, authorization: Some("Bearer t"), ..read("/", None) };
        assert_eq!(refusal_of(&access.check(&asked)), Some(Refusal::Host), "{host:?}");
    }
}

#[test]
fn off_loopback_a_token_must_be_given() {
    let lan: SocketAddr = "192.168.1.5:7878".parse().unwrap();
    if std::env::var(TOKEN_VAR).is_err() {
        let e = token_for("--addr", lan, None).unwrap_err();
        assert!(e.is_bad_input());
        assert!(
            e.to_string().contains("give a token (--token TOKEN or $STRATA_SERVE_TOKEN)"),
            "{e}"
        );
        let generated = token_for("--serve", "127.0.0.1:0".parse().unwrap(), None).unwrap();
        assert_eq!(generated.len(), 32, "{generated}");
    }
    assert_eq!(
        token_for("--addr", lan, Some("a-given-lan-token-9f3".into())).unwrap(),
        "a-given-lan-token-9f3"
    );
}
