//! URLs of model servers: `--base-url`, `$OPENAI_BASE_URL`, a team file's `base_url`.

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
