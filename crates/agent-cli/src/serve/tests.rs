//! The server's own parts: the page's escaping, the statuses of the library's refusals as
//! axum's, the query's agent (the access rules, the API's answers and their statuses are
//! tested in `strata::dashboard`).

use super::*;

#[test]
fn the_token_is_escaped_in_the_page() {
    assert_eq!(html_escape(r#"<a href="x">'&"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
    assert_eq!(html_escape("t0k3n"), "t0k3n");
}

#[test]
fn each_refusal_has_its_status_and_an_agent_is_read_from_the_query() {
    for kind in [ApiErrorKind::NotFound, ApiErrorKind::Unreachable, ApiErrorKind::Failed] {
        assert_eq!(status_of(kind).as_u16(), kind.http_status(), "{kind:?}");
    }
    assert_eq!(agent_of(Some("after=2&agent=exec%2D1")).as_deref(), Some("exec-1"));
    assert_eq!(agent_of(None), None);
}
