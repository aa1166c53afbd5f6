//! URLs: those of model servers (`--base-url`, `$OPENAI_BASE_URL`, a team file's `base_url`),
//! and query strings (the dashboard's): values percent-encoded and decoded, one found by name.

/// Parses a model server's API root (`--base-url`, `$OPENAI_BASE_URL`): an http(s) URL with a
/// host, such as `http://127.0.0.1:8080/v1`; given back trimmed.
pub fn parse_base_url(text: &str) -> Result<String, String> {
    let url = text.trim();
    let bad = || {
        format!(
            "`{url}` is not an http(s) URL; write it like https://api.openai.com/v1 or http://127.0.0.1:8080/v1"
        )
    };
    let rest =
        url.strip_prefix("http://").or_else(|| url.strip_prefix("https://")).ok_or_else(bad)?;
    if rest.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\') {
        return Err(bad());
    }
    let (host, port) = url_host(url).ok_or_else(bad)?;
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    if host.is_empty() || !port_ok {
        return Err(bad());
    }
    Ok(url.to_owned())
}

/// The host of an http(s) URL (without the brackets of an IPv6 address) and its port, if it
/// gives one; `None` when it has no `scheme://`.
pub fn url_host(url: &str) -> Option<(&str, Option<&str>)> {
    let (_, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    // After the user information, if any (`user:password@host`).
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        return Some((host, port));
    }
    Some(match host_port.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (host_port, None),
    })
}

/// `text` percent-encoded for a query value: every byte but ASCII letters, digits and `-._~`.
pub fn query_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `text` percent-decoded (`+` is a space), if it is valid UTF-8 once decoded and every `%`
/// is followed by two hex digits.
pub fn query_unescape(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The raw (still encoded) value of the first `name=` pair of `query` (`a=1&b=2`), if any.
pub fn query_raw<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// The decoded value of the first `name=` pair of `query`, if there is one and it decodes.
pub fn query_value(query: &str, name: &str) -> Option<String> {
    query_raw(query, name).and_then(query_unescape)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;

    #[test]
    fn query_values_round_trip_and_are_found_by_name() {
        for text in ["abc", "a b&c=d/é%", "t0k"] {
            assert_eq!(query_unescape(&query_escape(text)).as_deref(), Some(text));
        }
        assert_eq!(query_escape("a&b"), "a%26b");
        assert_eq!(query_unescape("a+b%2B"), Some("a b+".to_owned()));
        assert_eq!(query_unescape("%zz"), None);
        assert_eq!(query_unescape("%4"), None);
        assert_eq!(query_unescape("%FF"), None, "not UTF-8");
        let query = "after=3&agent=exec%2D1&agent=x&agents=y";
        assert_eq!(query_value(query, "agent").as_deref(), Some("exec-1"));
        assert_eq!(query_raw(query, "after"), Some("3"));
        assert_eq!(query_value(query, "age"), None, "a whole name only");
        assert_eq!(query_value(query, "token"), None);
    }
}
