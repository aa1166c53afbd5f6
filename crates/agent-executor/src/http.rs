//! The small HTTP client of the built-in kinds (`research_agent` fetches pages,
//! `integrations_agent` calls endpoints), behind the crate's `http` feature.
//!
//! Every request's URL must be `http` or `https`, carry no credentials, and have a host (and
//! port) that the executor's [`HttpPolicy`] allows; it is checked before anything is sent. A
//! redirect is followed only where the client is told to follow redirects, and only to an
//! allowed host (at most [`MAX_REDIRECTS`]); a redirect elsewhere is a
//! [`FailureKind::Permission`] failure naming the host, and nothing is sent there. Each request
//! gives up after [`HttpPolicy::timeout`]; an answer's body is read up to
//! [`HttpPolicy::max_body_bytes`] and the rest is cut (the answer says so). No system proxy is
//! used. Transport failures are [`FailureKind::Network`] or [`FailureKind::Timeout`], both
//! transient.
//!
//! Header values are marked sensitive and never logged; callers redact secrets from what they
//! show ([`redact`]).
//!
//! Without the `http` feature every request fails with a [`FailureKind::InvalidInput`] that
//! says the feature is off.

use agent_state::FailureKind;

use crate::env::{HttpPolicy, Method};
use crate::kind::KindError;

/// Most redirects followed for one request.
#[cfg_attr(
    not(feature = "http"),
    allow(dead_code, reason = "used by the client of the `http` feature")
)]
pub(crate) const MAX_REDIRECTS: usize = 5;

/// Whether a client follows redirects (to allowed hosts only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Redirects {
    /// Follow redirects to allowed hosts, at most [`MAX_REDIRECTS`].
    AllowedHosts,
    /// Never follow: a redirect is a failure that names where it pointed.
    Never,
}

/// One request to send.
#[cfg_attr(
    not(feature = "http"),
    allow(dead_code, reason = "used by the client of the `http` feature")
)]
#[derive(Debug)]
pub(crate) struct Outgoing {
    /// The method.
    pub(crate) method: Method,
    /// The absolute URL.
    pub(crate) url: String,
    /// Header names and values (values are sensitive: never logged).
    pub(crate) headers: Vec<(String, String)>,
    /// The body, with its content type.
    pub(crate) body: Option<(&'static str, Vec<u8>)>,
}

/// An answer (any status; a redirect only when it could not be followed and had no target).
#[derive(Clone, Debug)]
pub(crate) struct Fetched {
    /// The status code.
    pub(crate) status: u16,
    /// The status line's reason (`Not Found`), empty if none is known.
    pub(crate) reason: String,
    /// The URL that answered (after redirects).
    pub(crate) url: String,
    /// The `Content-Type`, if given.
    pub(crate) content_type: Option<String>,
    /// The body, at most the policy's `max_body_bytes`.
    pub(crate) body: Vec<u8>,
    /// Whether the body was cut at that limit.
    pub(crate) truncated: bool,
}

impl Fetched {
    /// Whether the status is 2xx.
    pub(crate) fn success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `404 Not Found`.
    pub(crate) fn status_line(&self) -> String {
        if self.reason.is_empty() {
            self.status.to_string()
        } else {
            format!("{} {}", self.status, self.reason)
        }
    }
}

/// `text` with every non-empty secret replaced by `[redacted]`.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| !s.is_empty()) {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), "[redacted]");
        }
    }
    out
}

/// The allowed hosts in words, for messages.
#[cfg_attr(
    not(feature = "http"),
    allow(dead_code, reason = "used by the client of the `http` feature")
)]
pub(crate) fn allowed_hosts(policy: &HttpPolicy) -> String {
    if policy.allow_hosts.is_empty() { "none".to_owned() } else { policy.allow_hosts.join(", ") }
}

/// The failure of a request whose host the policy does not allow.
#[cfg_attr(
    not(feature = "http"),
    allow(dead_code, reason = "used by the client of the `http` feature")
)]
pub(crate) fn host_refused(authority: &str, policy: &HttpPolicy, what: &str) -> KindError {
    KindError::new(
        FailureKind::Permission,
        format!(
            "{what}: host `{authority}` is not allowed (allowed hosts: {}); add it to \
             `[http] allow_hosts` to let runs reach it",
            allowed_hosts(policy)
        ),
    )
}

#[cfg(not(feature = "http"))]
pub(crate) use off::{HttpClient, check_url};

#[cfg(feature = "http")]
pub(crate) use on::{HttpClient, check_url};

#[cfg(not(feature = "http"))]
mod off {
    use super::{Fetched, Outgoing, Redirects};
    use crate::env::HttpPolicy;
    use crate::kind::KindError;

    fn feature_off() -> KindError {
        KindError::invalid(
            "HTTP is off: this build of the executor has no `http` feature (agent-executor's \
             `http` feature, which the `strata` command enables); rebuild with it, or leave out \
             what needs the network (`urls`, endpoints)",
        )
    }

    /// Without the `http` feature: no URL can be used.
    pub(crate) fn check_url(
        _policy: &HttpPolicy,
        _url: &str,
        _what: &str,
    ) -> Result<String, KindError> {
        Err(feature_off())
    }

    /// Without the `http` feature: a client that cannot be made.
    #[derive(Debug)]
    pub(crate) struct HttpClient;

    impl HttpClient {
        /// Fails: the feature is off.
        pub(crate) fn new(_policy: &HttpPolicy, _redirects: Redirects) -> Result<Self, KindError> {
            Err(feature_off())
        }

        /// Fails: the feature is off.
        pub(crate) async fn send(&self, _request: Outgoing) -> Result<Fetched, KindError> {
            Err(feature_off())
        }
    }
}

#[cfg(feature = "http")]
mod on {
    use std::error::Error as _;

    use agent_state::FailureKind;
    use reqwest::Url;
    use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION};

    use super::{Fetched, MAX_REDIRECTS, Outgoing, Redirects, host_refused};
    use crate::env::{HttpPolicy, Method};
    use crate::kind::KindError;

    /// The authority (`host[:port]`) of `url`, as written in messages.
    fn authority(url: &Url) -> String {
        let host = url.host_str().unwrap_or_default();
        match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        }
    }

    /// `url` without its query and fragment, for messages and logs.
    fn shown(url: &Url) -> String {
        format!("{}://{}{}", url.scheme(), authority(url), url.path())
    }

    fn allowed(policy: &HttpPolicy, url: &Url) -> bool {
        matches!(url.scheme(), "http" | "https")
            && url.host_str().is_some_and(|host| policy.allows(host, url.port_or_known_default()))
    }

    /// Parses `url` and checks it against `policy`: an `http(s)` URL with a host, no
    /// credentials, and a host the policy allows. `what` names it in messages (`url
    /// \`...\``). Returns the URL as it will be requested.
    pub(crate) fn check_url(
        policy: &HttpPolicy,
        url: &str,
        what: &str,
    ) -> Result<String, KindError> {
        Ok(parse_allowed(policy, url, what)?.to_string())
    }

    fn parse_allowed(policy: &HttpPolicy, url: &str, what: &str) -> Result<Url, KindError> {
        let parsed = Url::parse(url.trim()).map_err(|e| {
            KindError::invalid(format!(
                "{what}: not a URL ({e}); write an absolute http or https URL such as \
                 https://docs.example.com/page"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(KindError::invalid(format!(
                "{what}: scheme `{}` is not supported; use http or https",
                parsed.scheme()
            )));
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(KindError::invalid(format!("{what}: the URL has no host")));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(KindError::invalid(format!(
                "{what}: the URL holds credentials (`user:password@`); remove them (an endpoint \
                 sends credentials in headers read from environment variables)"
            )));
        }
        if !allowed(policy, &parsed) {
            return Err(host_refused(&authority(&parsed), policy, what));
        }
        Ok(parsed)
    }

    /// An HTTP client bound to one policy.
    #[derive(Debug)]
    pub(crate) struct HttpClient {
        client: reqwest::Client,
        policy: HttpPolicy,
        redirects: Redirects,
    }

    impl HttpClient {
        /// A client for `policy` that follows redirects as `redirects` says.
        pub(crate) fn new(policy: &HttpPolicy, redirects: Redirects) -> Result<Self, KindError> {
            if policy.timeout_ms == 0 {
                return Err(KindError::invalid(
                    "the HTTP policy's `timeout_ms` is 0; give the longest wait for one request",
                ));
            }
            let redirect = match redirects {
                Redirects::Never => reqwest::redirect::Policy::none(),
                Redirects::AllowedHosts => {
                    let policy = policy.clone();
                    reqwest::redirect::Policy::custom(move |attempt| {
                        if attempt.previous().len() > MAX_REDIRECTS
                            || !allowed(&policy, attempt.url())
                        {
                            attempt.stop()
                        } else {
                            attempt.follow()
                        }
                    })
                }
            };
            let client = reqwest::Client::builder()
                .no_proxy()
                .timeout(policy.timeout())
                .redirect(redirect)
                .build()
                .map_err(|e| {
                    KindError::new(
                        FailureKind::Internal,
                        format!("cannot make the HTTP client: {}", chain(&e)),
                    )
                })?;
            Ok(Self { client, policy: policy.clone(), redirects })
        }

        /// Sends `request` (its URL checked against the policy first) and reads the answer,
        /// whatever its status. A redirect that was not followed is a failure naming where it
        /// pointed.
        pub(crate) async fn send(&self, request: Outgoing) -> Result<Fetched, KindError> {
            let url = parse_allowed(&self.policy, &request.url, "the request")?;
            let target = shown(&url);
            let method = match request.method {
                Method::Get => reqwest::Method::GET,
                Method::Post => reqwest::Method::POST,
                Method::Put => reqwest::Method::PUT,
                Method::Patch => reqwest::Method::PATCH,
                Method::Delete => reqwest::Method::DELETE,
            };
            let mut headers = HeaderMap::new();
            for (name, value) in &request.headers {
                let header = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    KindError::invalid(format!(
                        "header name `{name}` is not a valid HTTP header name"
                    ))
                })?;
                // The value is never shown: it may be a secret.
                let mut value = HeaderValue::from_str(value).map_err(|_| {
                    KindError::invalid(format!(
                        "the value of header `{name}` cannot travel in an HTTP header (it holds a \
                         control character or non-ASCII text); check where it comes from"
                    ))
                })?;
                value.set_sensitive(true);
                headers.insert(header, value);
            }
            let mut builder = self.client.request(method, url.clone()).headers(headers);
            if let Some((content_type, body)) = request.body {
                builder = builder.header(CONTENT_TYPE, content_type).body(body);
            }
            let mut response = builder.send().await.map_err(|e| transport(&target, &e))?;
            let status = response.status();
            let answered = response.url().clone();
            tracing::debug!(method = request.method.as_str(), url = %target, status = status.as_u16(), "HTTP answer");
            if status.is_redirection()
                && let Some(location) = response.headers().get(LOCATION)
            {
                return Err(self.redirect_failure(&target, &answered, location));
            }
            let content_type = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            let limit = self.policy.max_body_bytes;
            let mut body = Vec::new();
            let mut truncated = false;
            while let Some(chunk) = response.chunk().await.map_err(|e| transport(&target, &e))? {
                let room = limit.saturating_sub(body.len());
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            if truncated {
                tracing::debug!(url = %target, limit, "HTTP body cut at the policy's limit");
            }
            Ok(Fetched {
                status: status.as_u16(),
                reason: status.canonical_reason().unwrap_or_default().to_owned(),
                url: shown(&answered),
                content_type,
                body,
                truncated,
            })
        }

        fn redirect_failure(
            &self,
            target: &str,
            answered: &Url,
            location: &HeaderValue,
        ) -> KindError {
            let Some(next) = location.to_str().ok().and_then(|l| answered.join(l).ok()) else {
                return KindError::new(
                    FailureKind::Malformed,
                    format!("{target} answered a redirect whose `Location` is not a URL"),
                );
            };
            if !allowed(&self.policy, &next) {
                return host_refused(
                    &authority(&next),
                    &self.policy,
                    &format!("{target} redirected to {}, which was not followed", shown(&next)),
                );
            }
            match self.redirects {
                Redirects::Never => KindError::new(
                    FailureKind::Client,
                    format!(
                        "{target} answered with a redirect to {}; redirects are not followed \
                         here: use the final address",
                        shown(&next)
                    ),
                ),
                Redirects::AllowedHosts => KindError::new(
                    FailureKind::Client,
                    format!("{target}: more than {MAX_REDIRECTS} redirects; use the final address"),
                ),
            }
        }
    }

    /// A transport failure: a timeout, or the network.
    fn transport(target: &str, error: &reqwest::Error) -> KindError {
        let kind = if error.is_timeout() { FailureKind::Timeout } else { FailureKind::Network };
        KindError::new(kind, format!("{target}: {}", chain(error)))
    }

    /// An error and its sources, without the URL (which may carry a query).
    fn chain(error: &reqwest::Error) -> String {
        let mut text = if error.is_timeout() {
            "timed out".to_owned()
        } else if error.is_connect() {
            "could not connect".to_owned()
        } else if error.is_body() || error.is_decode() {
            "the answer broke off".to_owned()
        } else {
            "the request failed".to_owned()
        };
        let mut source = error.source();
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !text.ends_with(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            source = cause.source();
        }
        text
    }
}
