//! What the executor lets runs reach: the workspace and its tools, the hosts HTTP may go to,
//! and the configured endpoints of `integrations_agent`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use agent_core::tools::{ToolContext, ToolRegistry};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The environment shared by every run of an executor.
#[derive(Clone, Debug)]
pub struct ExecEnv {
    /// The workspace the file tools are confined to, and where capsules keep scratch
    /// directories. `None`: kinds that need files refuse with a clear error.
    pub workspace: Option<Arc<ToolContext>>,
    /// The workspace tools a run may call through its capsule.
    pub tools: Arc<ToolRegistry>,
    /// Which hosts HTTP may reach.
    pub http: HttpPolicy,
    /// The endpoints `integrations_agent` may call, by name.
    pub endpoints: BTreeMap<String, Endpoint>,
}

impl Default for ExecEnv {
    fn default() -> Self {
        Self {
            workspace: None,
            tools: Arc::new(ToolRegistry::with_builtins()),
            http: HttpPolicy::default(),
            endpoints: BTreeMap::new(),
        }
    }
}

impl ExecEnv {
    /// An environment on `workspace` with the built-in tools, no HTTP hosts and no endpoints.
    pub fn with_workspace(workspace: Arc<ToolContext>) -> Self {
        Self { workspace: Some(workspace), ..Self::default() }
    }
}

/// Which hosts runs may reach over HTTP. Empty: none (the default: a run reaches the network
/// only where the team file says).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HttpPolicy {
    /// Host names or IP addresses (`docs.example.com`, `127.0.0.1`), optionally with a port
    /// (`127.0.0.1:8080`); a name matches that host only, not its subdomains.
    pub allow_hosts: Vec<String>,
    /// Longest wait for one request, in milliseconds.
    pub timeout_ms: u64,
    /// Largest body read from an answer, in bytes; the rest is cut and said so.
    pub max_body_bytes: usize,
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self { allow_hosts: Vec::new(), timeout_ms: 30_000, max_body_bytes: 1024 * 1024 }
    }
}

impl HttpPolicy {
    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// Whether `host` (and `port`, when the entry names one) is allowed.
    pub fn allows(&self, host: &str, port: Option<u16>) -> bool {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        self.allow_hosts.iter().any(|entry| {
            let (h, p) = split_host_port(entry);
            h.eq_ignore_ascii_case(host) && p.is_none_or(|p| Some(p) == port)
        })
    }
}

/// `host:port` → (`host`, port); a bare host or an IPv6 address without brackets → no port.
fn split_host_port(entry: &str) -> (&str, Option<u16>) {
    if let Some((host, tail)) = entry.strip_prefix('[').and_then(|rest| rest.split_once(']')) {
        return (host, tail.strip_prefix(':').and_then(|p| p.parse().ok()));
    }
    match entry.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

/// The HTTP methods an endpoint may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
    /// PUT.
    Put,
    /// PATCH.
    Patch,
    /// DELETE.
    Delete,
}

impl Method {
    /// The method's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
            Method::Delete => "DELETE",
        }
    }
}

/// A header's value: written in the team file, or read from an environment variable when the
/// call is made (so secrets stay out of files and logs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderValue {
    /// The value itself.
    Value(String),
    /// The name of the environment variable that holds it.
    Env(String),
}

/// An external service `integrations_agent` may call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// Its name, which requests use.
    pub name: String,
    /// The method.
    pub method: Method,
    /// The URL (`http` or `https`); its host must be in the [`HttpPolicy`].
    pub url: String,
    /// Headers to send.
    #[serde(default)]
    pub headers: BTreeMap<String, HeaderValue>,
    /// What it does, for the reasoner and `strata exec --list`.
    #[serde(default)]
    pub description: String,
}

/// A malformed endpoint definition.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("endpoint `{name}`: {problem}")]
pub struct EndpointError {
    /// The endpoint.
    pub name: String,
    /// What is wrong and what is expected.
    pub problem: String,
}

impl Endpoint {
    /// Checks the definition against `policy`: a name, an `http(s)` URL with a host the policy
    /// allows, header names of visible ASCII without `:`, environment variable names that are
    /// not empty.
    pub fn check(&self, policy: &HttpPolicy) -> Result<(), EndpointError> {
        let fail = |problem: String| EndpointError { name: self.name.clone(), problem };
        if self.name.trim().is_empty() {
            return Err(fail("the name is empty".into()));
        }
        let (scheme, rest) = self.url.split_once("://").ok_or_else(|| {
            fail(format!("`{}` is not a URL (expected http://host/...)", self.url))
        })?;
        if scheme != "http" && scheme != "https" {
            return Err(fail(format!("scheme `{scheme}` is not supported; use http or https")));
        }
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
        if authority.is_empty() {
            return Err(fail(format!("`{}` has no host", self.url)));
        }
        let (host, port) = split_host_port(authority);
        if !policy.allows(host, port) {
            return Err(fail(format!(
                "host `{authority}` is not in the allowed hosts ({}); add it to `[http] allow_hosts`",
                if policy.allow_hosts.is_empty() {
                    "none".to_owned()
                } else {
                    policy.allow_hosts.join(", ")
                }
            )));
        }
        for (name, value) in &self.headers {
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                return Err(fail(format!("header name `{name}` is not valid")));
            }
            if let HeaderValue::Env(var) = value
                && var.trim().is_empty()
            {
                return Err(fail(format!("header `{name}` names an empty environment variable")));
            }
        }
        Ok(())
    }
}
