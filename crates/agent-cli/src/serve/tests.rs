//! The server's own parts: the page's escaping and the statuses of the library's refusals
//! (the access rules and the API's answers are tested in `strata::dashboard`).

use super::*;

#[test]
fn the_token_is_escaped_in_the_page() {
    assert_eq!(html_escape(r#"<a href="x">'&"#), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;");
    assert_eq!(html_escape("t0k3n"), "t0k3n");
}

#[test]
fn each_refusal_has_its_status() {
    let statuses = [
        (ApiErrorKind::NotFound, 404),
        (ApiErrorKind::Conflict, 409),
        (ApiErrorKind::BadRequest, 400),
        (ApiErrorKind::TooLarge, 413),
        (ApiErrorKind::Unreachable, 502),
        (ApiErrorKind::Failed, 500),
    ];
    for (kind, status) in statuses {
        assert_eq!(status_of(kind).as_u16(), status, "{kind:?}");
    }
    assert_eq!(agent_of(Some("after=2&agent=exec%2D1")).as_deref(), Some("exec-1"));
    assert_eq!(agent_of(None), None);
}
