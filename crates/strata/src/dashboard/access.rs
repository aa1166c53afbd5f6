//! Who may use the dashboard: its access rules, as pure functions of what a request says, for
//! whatever HTTP server serves it ([`Access::check`]).
//!
//! - Loopback by default; bound elsewhere, a token must be given (`--token` or [`TOKEN_VAR`]),
//!   else one is generated ([`token_for`]). The token is a secret of this process: it is
//!   redacted from everything stored or served ([`agent_core::secrets`]).
//! - A request whose `Host` is not the bound address, `localhost:PORT` or a loopback address
//!   with the port is refused ([`host_ok`]): a page of another site that renamed itself to
//!   this address (DNS rebinding) cannot read it.
//! - Every read (the page, its script, the JSON API, the event streams) needs the token:
//!   `Authorization: Bearer TOKEN`, or the cookie `strata_token_PORT` that a GET with
//!   `?token=TOKEN` sets before redirecting to the same URL without the token.
//! - Signing (anything but GET and HEAD) takes the token from the `Authorization` header
//!   only: a cookie alone, which a browser would send on a forged request too, is refused, and
//!   so is a `?token=` on a POST.

use std::net::SocketAddr;

use crate::error::{Error, Result};
use crate::url::{query_escape, query_unescape};

#[cfg(test)]
mod tests;

/// The environment variable of the token.
pub const TOKEN_VAR: &str = "STRATA_SERVE_TOKEN";

/// The token of a dashboard on `addr`, given as `flag` (`--addr`, `--serve`): `given`, else
/// [`TOKEN_VAR`], else a new one (registered as a secret of this process). Bad input when
/// none is given and `addr` is not a loopback address.
pub fn token_for(flag: &str, addr: SocketAddr, given: Option<String>) -> Result<String> {
    let given = given.or_else(|| std::env::var(TOKEN_VAR).ok()).filter(|t| !t.trim().is_empty());
    if !addr.ip().is_loopback() && given.is_none() {
        let how = if flag == "--addr" { "--token TOKEN or " } else { "" };
        return Err(Error::bad_input(format!(
            "{flag} {addr} is not a loopback address: give a token ({how}${TOKEN_VAR}) so that nobody else on the network can read the runs or sign"
        )));
    }
    let token = given.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
    // Redacted from what is stored and served, like every secret of this process.
    agent_core::secrets::register(&token);
    Ok(token)
}

/// A request as the rules look at it.
#[derive(Debug, Default)]
pub struct Asked<'a> {
    /// A GET or HEAD: a read (anything else signs).
    pub reading: bool,
    /// The URL's path.
    pub path: &'a str,
    /// The URL's query, if any (still encoded).
    pub query: Option<&'a str>,
    /// The `Host` header (else the URL's authority).
    pub host: Option<&'a str>,
    /// The `Authorization` header.
    pub authorization: Option<&'a str>,
    /// Every `Cookie` header.
    pub cookies: Vec<&'a str>,
}

/// What the rules say of a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Serve it.
    Pass,
    /// A first load with the token in its URL: set `cookie` (`Set-Cookie`) and redirect to
    /// `location`, the same URL without the token.
    Redirect {
        /// Where to: the path and the rest of the query.
        location: String,
        /// The `Set-Cookie` value.
        cookie: String,
    },
    /// Refuse it, saying `message`.
    Refused {
        /// Why.
        refusal: Refusal,
        /// What to tell the client.
        message: String,
    },
}

/// Why a request is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Its `Host` is not this server's (HTTP 421).
    Host,
    /// A request that signs has its token in the URL (HTTP 400).
    TokenInUrl,
    /// It has no token, or not this server's (HTTP 401); `page`: a read of a page (not of the
    /// API), answered in text rather than JSON.
    NoToken {
        /// A page, not the API.
        page: bool,
    },
}

/// The access rules of a dashboard listening on `local` with `token`.
#[derive(Clone, Debug)]
pub struct Access {
    token: String,
    local: SocketAddr,
}

impl Access {
    /// The rules of the server on `local` whose token is `token`.
    pub fn new(token: String, local: SocketAddr) -> Self {
        Self { token, local }
    }

    /// The token.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Where the server listens.
    pub fn local(&self) -> SocketAddr {
        self.local
    }

    /// The URL to open: the page, with the token for its first load (which sets the cookie).
    pub fn url(&self) -> String {
        format!("http://{}/?token={}", self.local, query_escape(&self.token))
    }

    /// The name of the cookie that carries the token (cookies are shared by every port of a
    /// host: the port keeps two dashboards apart).
    pub fn cookie_name(&self) -> String {
        format!("strata_token_{}", self.local.port())
    }

    /// Whether `given` is the token (compared in constant time).
    pub fn token_ok(&self, given: Option<&str>) -> bool {
        let Some(given) = given else { return false };
        let (a, b) = (given.as_bytes(), self.token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    /// What the rules say of `asked`: its `Host` must name this server; it needs the token,
    /// from the `Authorization` header or this server's cookie, and from the header only when
    /// it signs; a read with `?token=TOKEN` sets the cookie and is redirected to the same URL
    /// without the token.
    pub fn check(&self, asked: &Asked<'_>) -> Verdict {
        if !asked.host.is_some_and(|h| host_ok(self.local, h)) {
            return refused(
                Refusal::Host,
                format!(
                    "the Host {} is not this server's address: open http://{}/ (or localhost with its port)",
                    asked.host.unwrap_or("(none)").escape_debug(),
                    self.local
                ),
            );
        }
        let page = !asked.path.starts_with("/api/");
        if let Some((token, rest)) = query_token(asked.query) {
            return self.first_load(asked, &token, &rest);
        }
        if asked.authorization.and_then(header_token).is_some_and(|t| self.token_ok(Some(t))) {
            return Verdict::Pass;
        }
        if !asked.reading {
            return refused(
                Refusal::NoToken { page: false },
                "signing needs the token `strata serve` printed in the header `Authorization: Bearer TOKEN` (a cookie alone is not enough)",
            );
        }
        let by_cookie = cookie_token(asked.cookies.iter().copied(), &self.cookie_name())
            .and_then(query_unescape)
            .is_some_and(|t| self.token_ok(Some(&t)));
        if by_cookie {
            return Verdict::Pass;
        }
        no_token(page, "no token")
    }

    /// A request with `?token=` (`token`, decoded; `rest`: the rest of its query): a read with
    /// the right one is redirected with the cookie set.
    fn first_load(&self, asked: &Asked<'_>, token: &str, rest: &str) -> Verdict {
        if !asked.reading {
            return refused(
                Refusal::TokenInUrl,
                "signing never takes the token from the URL (it would be logged and could be forged by a link): send `Authorization: Bearer TOKEN`",
            );
        }
        if !self.token_ok(Some(token)) {
            return no_token(
                !asked.path.starts_with("/api/"),
                "the token in the URL is not this server's",
            );
        }
        let path = asked.path;
        let location = if rest.is_empty() { path.to_owned() } else { format!("{path}?{rest}") };
        let cookie = format!(
            "{}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_name(),
            query_escape(&self.token)
        );
        Verdict::Redirect { location, cookie }
    }
}

fn refused(refusal: Refusal, message: impl Into<String>) -> Verdict {
    Verdict::Refused { refusal, message: message.into() }
}

/// The refusal of a read without the token (`why`), saying how to give it.
fn no_token(page: bool, why: &str) -> Verdict {
    refused(
        Refusal::NoToken { page },
        format!(
            "{why}: open the URL `strata serve` printed (http://ADDR/?token=TOKEN), or send `Authorization: Bearer TOKEN`"
        ),
    )
}

/// The token of an `Authorization: Bearer TOKEN` header's value.
pub fn header_token(value: &str) -> Option<&str> {
    value.strip_prefix("Bearer ")
}

/// The value of the cookie `name` in `cookies` (`Cookie` header values), still encoded.
pub fn cookie_token<'r>(cookies: impl IntoIterator<Item = &'r str>, name: &str) -> Option<&'r str> {
    cookies
        .into_iter()
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(name)?.strip_prefix('='))
}

/// The `?token=` of a query (decoded; empty when it does not decode), and the query without
/// it.
pub fn query_token(query: Option<&str>) -> Option<(String, String)> {
    let query = query?;
    let mut token = None;
    let mut rest = Vec::new();
    for pair in query.split('&') {
        match pair.strip_prefix("token=") {
            Some(value) if token.is_none() => {
                token = Some(query_unescape(value).unwrap_or_default())
            }
            _ if pair.is_empty() => {}
            _ => rest.push(pair),
        }
    }
    Some((token?, rest.join("&")))
}

/// Whether `host` (a request's `Host`) names the server listening on `local`: its own address,
/// `localhost` or a loopback address, with its port (80 when none is given); any IP address
/// with the port when it listens on all of them. A name a page of another site could resolve
/// to this address (DNS rebinding) is none of these.
pub fn host_ok(local: SocketAddr, host: &str) -> bool {
    let host = host.trim();
    let (name, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else { return false };
        match after.strip_prefix(':') {
            Some(port) => (ip, port.parse::<u16>().ok()),
            None if after.is_empty() => (ip, Some(80)),
            None => return false,
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, port.parse::<u16>().ok()),
            None => (host, Some(80)),
        }
    };
    if port != Some(local.port()) {
        return false;
    }
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip == local.ip() || ip.is_loopback() || local.ip().is_unspecified(),
        Err(_) => false,
    }
}
