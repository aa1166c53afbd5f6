//! `integrations_agent`: calls one of the endpoints the executor is configured with
//! ([`ExecEnv::endpoints`](crate::ExecEnv)) and returns its answer.
//!
//! The request names the `endpoint`; it may add a `path` to the endpoint's URL, `query`
//! parameters, and a JSON `body` (not with GET). Before anything is sent:
//!
//! - an endpoint that is not configured is [`FailureKind::InvalidInput`], listing the known
//!   ones;
//! - a URL whose host is not in `[http] allow_hosts` is [`FailureKind::Permission`]; any other
//!   fault of the definition ([`Endpoint::check`](crate::Endpoint::check)) is
//!   [`FailureKind::InvalidInput`];
//! - a header whose value comes from an environment variable
//!   ([`HeaderValue::Env`](crate::HeaderValue)) reads it now; a variable that is not set
//!   blocks the run ([`FailureKind::MissingInput`]) and names the variable, never a value.
//!
//! Values read from the environment are secrets: they travel only in their header (marked
//! sensitive), and are replaced by `[redacted]` anywhere the answer or an error would show them.
//! A 2xx answer completes the run with `data = {endpoint, status, body, truncated}` (`body`
//! parsed as JSON when it is JSON, else text); any other status fails it with
//! [`FailureKind::from_http_status`]: 5xx, 429 and 408 are transient and retried by the
//! executor's policy, other 4xx are permanent. Redirects are not followed. The kind is not
//! idempotent: a run a crash interrupted is not repeated.

use std::fmt::Write as _;

use agent_state::FailureKind;
use async_trait::async_trait;
use serde_json::{Value, json};

use crate::capsule::Capsule;
use crate::env::{Endpoint, HeaderValue, Method};
use crate::http::{Fetched, HttpClient, Outgoing, Redirects, check_url, redact};
use crate::kind::{Kind, KindError, KindOutput};
use crate::request::RunRequest;
use agent_state::shorten;

/// The name `integrations_agent` is registered under.
pub const INTEGRATIONS_AGENT: &str = "integrations_agent";

/// Characters of an answer's body shown in the primary output.
const SHOWN_BODY_CHARS: usize = 4_000;

/// Characters of an error answer's body quoted in the failure.
const ERROR_BODY_CHARS: usize = 300;

/// The `integrations_agent` kind.
#[derive(Clone, Copy, Debug, Default)]
pub struct IntegrationsAgent;

#[async_trait]
impl Kind for IntegrationsAgent {
    fn name(&self) -> &str {
        INTEGRATIONS_AGENT
    }

    fn description(&self) -> &str {
        "calls a configured external endpoint (an API, email, calendar) on an allowed host and \
         returns its answer"
    }

    fn inputs_schema(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "endpoint": {
                    "type": "string",
                    "minLength": 1,
                    "description": "the name of a configured endpoint",
                },
                "body": {
                    "description": "any JSON, sent as the request's body (not with GET)",
                },
                "query": {
                    "type": "object",
                    "description": "query parameters, each a string",
                },
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "a path appended to the endpoint's URL, such as `/items/42`",
                },
            },
            "required": ["endpoint"],
            "additionalProperties": false,
        })
    }

    fn idempotent(&self) -> bool {
        false
    }

    async fn run(
        &self,
        request: &RunRequest,
        capsule: &mut Capsule,
    ) -> Result<KindOutput, KindError> {
        let (name, endpoint) = requested_endpoint(request, capsule)?;
        let policy = capsule.env().http.clone();
        let what = format!("endpoint `{name}`");
        // The host first: outside the allow-list is a permission failure.
        check_url(&policy, &endpoint.url, &what)?;
        endpoint.check(&policy).map_err(|e| KindError::invalid(e.to_string()))?;

        let url =
            endpoint_url(&endpoint.url, request.input_str("path"), request.inputs.get("query"))?;
        let url = check_url(&policy, &url, &what)?;
        let body = match request.inputs.get("body") {
            None | Some(Value::Null) => None,
            Some(_) if endpoint.method == Method::Get => {
                return Err(KindError::invalid(format!(
                    "{what} uses GET, which takes no body; give `query` parameters instead"
                )));
            }
            Some(body) => Some(("application/json", body.to_string().into_bytes())),
        };
        let (headers, secrets) = headers(&endpoint, &what)?;

        capsule.progress(10, format!("calling {what} ({})", endpoint.method.as_str()));
        let client = HttpClient::new(&policy, Redirects::Never)?;
        let fetched = client
            .send(Outgoing { method: endpoint.method, url, headers, body })
            .await
            .map_err(|e| KindError::new(e.kind(), redact(&e.0.reason, &secrets)))?;
        let text = redact(&fetched.text(), &secrets);
        capsule.note(
            "endpoint_called",
            json!({"endpoint": name, "method": endpoint.method.as_str(), "status": fetched.status}),
        );
        if !fetched.success() {
            return Err(error_answer(&fetched, &text, &what));
        }
        capsule.progress(90, format!("{what} answered {}", fetched.status_line()));
        let output = answer(&fetched, &text, &endpoint, name, policy.max_body_bytes);
        capsule.progress(100, format!("{what} done"));
        Ok(output)
    }
}

/// The endpoint the request names, with that name: a request that names none is blocked, one
/// that names an endpoint not configured is invalid (both list the known ones).
fn requested_endpoint<'r>(
    request: &'r RunRequest,
    capsule: &Capsule,
) -> Result<(&'r str, Endpoint), KindError> {
    let known = || {
        let names: Vec<&str> = capsule.env().endpoints.keys().map(String::as_str).collect();
        if names.is_empty() {
            "none are configured: define them in the team file's `[[endpoints]]`".to_owned()
        } else {
            format!("the endpoints are: {}", names.join(", "))
        }
    };
    let Some(name) = request.input_str("endpoint") else {
        return Err(KindError::missing(format!(
            "the endpoint to call: give `endpoint` ({})",
            known()
        )));
    };
    let Some(endpoint) = capsule.env().endpoints.get(name).cloned() else {
        return Err(KindError::invalid(format!("unknown endpoint `{name}`; {}", known())));
    };
    Ok((name, endpoint))
}

/// Headers as they are sent: each name and value.
type Headers = Vec<(String, String)>;

/// The headers sent to `endpoint` (`what`), those from environment variables read now, and
/// the secrets among their values (to redact from what is shown).
fn headers(endpoint: &Endpoint, what: &str) -> Result<(Headers, Vec<String>), KindError> {
    let mut headers = Vec::with_capacity(endpoint.headers.len());
    let mut secrets = Vec::new();
    for (header, value) in &endpoint.headers {
        let value = match value {
            HeaderValue::Value(v) => v.clone(),
            HeaderValue::Env(var) => match std::env::var(var) {
                Ok(secret) => {
                    secrets.push(secret.clone());
                    secret
                }
                Err(std::env::VarError::NotPresent) => {
                    return Err(KindError::missing(format!(
                        "the environment variable `{var}`, which holds header `{header}` of \
                         {what}: set it before the run"
                    )));
                }
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(KindError::invalid(format!(
                        "the environment variable `{var}` (header `{header}` of {what}) is \
                         not valid Unicode"
                    )));
                }
            },
        };
        headers.push((header.clone(), value));
    }
    Ok((headers, secrets))
}

/// The failure of a call that `what` answered with an error status (`text`: its body,
/// redacted): its class is the status's.
fn error_answer(fetched: &Fetched, text: &str, what: &str) -> KindError {
    let kind = FailureKind::from_http_status(fetched.status).unwrap_or(FailureKind::Client);
    let mut reason = format!(
        "{what} answered {}: {}",
        fetched.status_line(),
        shorten(text.trim(), ERROR_BODY_CHARS)
    );
    if kind == FailureKind::Permission {
        reason.push_str("; check the credentials its headers carry");
    }
    KindError::new(kind, reason)
}

/// The run's output from a 2xx answer of `endpoint` (requested as `name`), `text` its body,
/// redacted (`max_body_bytes`: the policy's limit, named when the body was cut).
fn answer(
    fetched: &Fetched,
    text: &str,
    endpoint: &Endpoint,
    name: &str,
    max_body_bytes: usize,
) -> KindOutput {
    let what = format!("endpoint `{name}`");
    let body = if fetched.truncated {
        Value::String(text.to_owned())
    } else {
        serde_json::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_owned()))
    };
    let mut primary = format!(
        "{} {what}: HTTP {}\n{}",
        endpoint.method.as_str(),
        fetched.status_line(),
        shorten(text.trim(), SHOWN_BODY_CHARS)
    );
    if fetched.truncated {
        let _ = write!(
            primary,
            "\n[cut: the answer is longer than {max_body_bytes} bytes, the policy's `max_body_bytes`]"
        );
    }
    KindOutput {
        primary_output: primary.trim_end().to_owned(),
        confidence: 1.0,
        artifacts: Vec::new(),
        data: json!({
            "endpoint": name,
            "status": fetched.status,
            "body": body,
            "truncated": fetched.truncated,
        }),
        needs_model: None,
    }
}

/// The endpoint's URL with `path` appended and `query` added (percent-encoded). The result is
/// checked against the policy again before it is used.
fn endpoint_url(
    base: &str,
    path: Option<&str>,
    query: Option<&Value>,
) -> Result<String, KindError> {
    let base = base.split('#').next().unwrap_or(base);
    let (mut url, mut params) = match base.split_once('?') {
        Some((u, q)) => (u.to_owned(), q.to_owned()),
        None => (base.to_owned(), String::new()),
    };
    if let Some(path) = path {
        let ok = !path.is_empty()
            && path
                .bytes()
                .all(|b| b.is_ascii_graphic() && !matches!(b, b'?' | b'#' | b'\\' | b'@'))
            && !path.contains("//")
            && !path.split('/').any(|segment| segment == ".." || segment == ".");
        if !ok {
            return Err(KindError::invalid(format!(
                "`path` `{path}` is not a plain URL path: use `/`-separated names without `..`, \
                 `//`, `?`, `#`, `@`, `\\` or spaces (give parameters in `query`)"
            )));
        }
        url = format!("{}/{}", url.trim_end_matches('/'), path.trim_start_matches('/'));
    }
    match query {
        None | Some(Value::Null) => {}
        Some(Value::Object(pairs)) => {
            for (key, value) in pairs {
                let Some(value) = value.as_str() else {
                    return Err(KindError::invalid(format!(
                        "`query` parameter `{key}` must be a string, found {value}"
                    )));
                };
                if !params.is_empty() {
                    params.push('&');
                }
                params.push_str(&encode(key));
                params.push('=');
                params.push_str(&encode(value));
            }
        }
        Some(other) => {
            return Err(KindError::invalid(format!(
                "`query` must be an object of strings, found {other}"
            )));
        }
    }
    if !params.is_empty() {
        url.push('?');
        url.push_str(&params);
    }
    Ok(url)
}

/// `text` percent-encoded for a query (only `A-Z a-z 0-9 - . _ ~` kept).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}
