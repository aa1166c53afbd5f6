//! Helpers the built-in kinds share: workspace paths given as inputs, cutting text to a size,
//! and the text of an HTML page.

use std::path::{Component, Path};

use crate::capsule::CAPSULES_DIR;
use crate::kind::KindError;
use crate::request::RunRequest;

/// The directory of the runtime's own state in a workspace; runs neither read nor write it
/// (it holds the capsules of other runs).
pub(crate) const STATE_DIR: &str = ".strata";

/// `requested` as a workspace-relative path (`a/b.md`): not empty, no root, no `..`, and not
/// inside [`STATE_DIR`]. `what` names the input in messages. A path that would leave the
/// workspace is refused before any tool runs.
pub(crate) fn workspace_path(requested: &str, what: &str) -> Result<String, KindError> {
    let path = Path::new(requested.trim());
    if requested.trim().is_empty() {
        return Err(KindError::invalid(format!("{what} is empty; give a path in the workspace")));
    }
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(KindError::invalid(format!(
                    "{what} `{requested}` leaves the workspace; give a path relative to the \
                     workspace root without `..`, such as `drafts/report.md`"
                )));
            }
        }
    }
    if parts.is_empty() {
        return Err(KindError::invalid(format!(
            "{what} `{requested}` is the workspace root; give the path of a file"
        )));
    }
    if in_state_dir(&parts.join("/")) {
        return Err(KindError::invalid(format!(
            "{what} `{requested}` is inside `{STATE_DIR}/`, which holds the runtime's state and \
             the capsules of other runs (`{CAPSULES_DIR}`); use another path"
        )));
    }
    Ok(parts.join("/"))
}

/// Whether a workspace-relative path lies in [`STATE_DIR`].
pub(crate) fn in_state_dir(path: &str) -> bool {
    Path::new(path)
        .components()
        .find(|c| !matches!(c, Component::CurDir))
        .is_some_and(|c| c.as_os_str() == STATE_DIR)
}

/// The input `name` as a list of strings (the schema has checked its shape).
pub(crate) fn string_list(request: &RunRequest, name: &str) -> Vec<String> {
    request
        .inputs
        .get(name)
        .and_then(serde_json::Value::as_array)
        .map(|items| {
            items.iter().filter_map(serde_json::Value::as_str).map(str::to_owned).collect()
        })
        .unwrap_or_default()
}

/// Whether a body of `content_type` (or, without one, starting like a page) is HTML.
pub(crate) fn is_html(content_type: Option<&str>, body: &str) -> bool {
    match content_type {
        Some(ct) => ct.to_ascii_lowercase().contains("html"),
        None => {
            let start = body.trim_start().get(..15).unwrap_or_default().to_ascii_lowercase();
            start.starts_with("<!doctype html") || start.starts_with("<html")
        }
    }
}

/// The readable text of an HTML page: tags, scripts, styles and comments removed, the common
/// entities decoded, blank runs collapsed to one line break.
pub(crate) fn html_to_text(html: &str) -> String {
    let mut out = String::with_capacity(html.len() / 2);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        let skip_to = if starts_with_ci(rest, "<!--") {
            Some("-->")
        } else if starts_with_ci(rest, "<script") {
            Some("</script")
        } else if starts_with_ci(rest, "<style") {
            Some("</style")
        } else {
            None
        };
        if let Some(end_marker) = skip_to {
            // A comment ends at `-->`; a script or a style at its closing tag's `>`.
            rest = match find_ignore_case(rest, end_marker) {
                Some(end) => &rest[end + end_marker.len()..],
                None => "",
            };
            if end_marker != "-->" {
                rest = rest.find('>').map_or("", |close| &rest[close + 1..]);
            }
            out.push(' ');
            continue;
        }
        match rest.find('>') {
            Some(close) => {
                let tag = &rest[..close];
                if ["<p", "<br", "<div", "<li", "<h", "<tr", "</p", "</div", "</li", "</h"]
                    .iter()
                    .any(|t| starts_with_ci(tag, t))
                {
                    out.push('\n');
                } else {
                    out.push(' ');
                }
                rest = &rest[close + 1..];
            }
            None => rest = "",
        }
    }
    out.push_str(rest);
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    let mut text = String::with_capacity(decoded.len());
    for line in decoded.lines() {
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if !line.is_empty() {
            text.push_str(&line);
            text.push('\n');
        }
    }
    text.trim_end().to_owned()
}

fn starts_with_ci(text: &str, prefix: &str) -> bool {
    text.as_bytes()
        .get(..prefix.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(prefix.as_bytes()))
}

/// The byte offset of `needle` (ASCII) in `haystack`, ignoring ASCII case.
fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    haystack
        .as_bytes()
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}
