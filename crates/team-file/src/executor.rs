//! The executor settings of a team file: `[http]`, `[[endpoints]]`, `[executor]`
//! with its per-kind overrides and the executors' own `executor_retry`, read into
//! [`ExecutorSettings`], which builds the team's [`Executor`]; and the executor kinds a `kind`
//! names ([`agent_executor::builtins()`]).

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::sync::{Arc, OnceLock};

use agent_core::tools::{ToolContext, ToolRegistry};
use agent_executor::{Endpoint, ExecEnv, Executor, HeaderValue, HttpPolicy, Method, Registry};
use agent_state::{AgentId, RetryPolicy};
use toml::Spanned;

use crate::error::{FileError, Seg, Source};
use crate::raw::{RawEndpoint, RawHttp, RawRetry, RawTeam};

/// What a team file says about the executor that runs the subtasks of executors with a
/// `kind`: the hosts HTTP may reach, the endpoints `integrations_agent` may call, and the
/// retry policies (the default, per kind, per agent).
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutorSettings {
    /// `[http]`: the hosts runs may reach, the request timeout, the largest body read.
    pub http: HttpPolicy,
    /// `[[endpoints]]`, by name, each checked against `http`.
    pub endpoints: BTreeMap<String, Endpoint>,
    /// `[executor]`: the retry policy of every run (the default,
    /// [`RetryPolicy::executor_default`], where a field is left out).
    pub policy: RetryPolicy,
    /// `[executor.kinds.<kind>]`: the policy of the runs of a kind, its fields left out taken
    /// from the kind's own policy, else from `policy`.
    pub kind_policies: BTreeMap<String, RetryPolicy>,
    /// An executor's `executor_retry`: its runs' policy, its fields left out taken from what
    /// the executor's kind gets ([`policy_for`](Self::policy_for) without it).
    pub agent_policies: BTreeMap<AgentId, RetryPolicy>,
}

impl Default for ExecutorSettings {
    /// No HTTP hosts, no endpoints, the default retry policy, no overrides.
    fn default() -> Self {
        Self {
            http: HttpPolicy::default(),
            endpoints: BTreeMap::new(),
            policy: RetryPolicy::executor_default(),
            kind_policies: BTreeMap::new(),
            agent_policies: BTreeMap::new(),
        }
    }
}

impl ExecutorSettings {
    /// The executor these settings describe, with the built-in kinds
    /// ([`agent_executor::builtins()`]), confined to `workspace` with the built-in tools, and
    /// reaching the allowed hosts and the endpoints, with the default, per-kind and per-agent
    /// retry policies (`Executor::with_agent_policy`: a run for that executor gets its own).
    pub fn executor(&self, workspace: Arc<ToolContext>) -> Executor {
        let env = ExecEnv {
            workspace: Some(workspace),
            tools: Arc::new(ToolRegistry::with_builtins()),
            http: self.http.clone(),
            endpoints: self.endpoints.clone(),
        };
        let mut executor = Executor::new(agent_executor::builtins())
            .with_env(env)
            .with_policy(self.policy.clone());
        for (kind, policy) in &self.kind_policies {
            executor = executor.with_kind_policy(kind.clone(), policy.clone());
        }
        for (agent, policy) in &self.agent_policies {
            executor = executor.with_agent_policy(agent.as_str(), policy.clone());
        }
        executor
    }

    /// The retry policy of a run of `kind` by `agent` (if it is an agent's): the agent's own,
    /// else the kind's override, else the kind's own policy, else the default.
    pub fn policy_for(&self, kind: &str, agent: Option<&AgentId>) -> RetryPolicy {
        agent
            .and_then(|a| self.agent_policies.get(a))
            .or_else(|| self.kind_policies.get(kind))
            .cloned()
            .or_else(|| kinds().get(kind).and_then(|k| k.policy()))
            .unwrap_or_else(|| self.policy.clone())
    }
}

/// The executor kinds a team or plan file may name: the built-in ones.
pub(crate) fn kinds() -> &'static Registry {
    static KINDS: OnceLock<Registry> = OnceLock::new();
    KINDS.get_or_init(agent_executor::builtins)
}

/// The known kinds, for messages.
pub(crate) fn known_kinds() -> String {
    crate::team::list_or_none(kinds().names())
}

/// A `kind` value: a registered executor kind.
pub(crate) fn check_kind(src: &Source<'_>, kind: &Spanned<String>) -> Result<String, FileError> {
    let name = kind.get_ref();
    if kinds().contains(name) {
        return Ok(name.clone());
    }
    Err(src.error(
        kind.span(),
        format!("unknown executor kind `{name}`; the kinds are: {}", known_kinds()),
    ))
}

/// `[http]`, `[[endpoints]]`, `[executor]` and the executors' `executor_retry`. `kind_of`
/// gives a configured executor's kind, already checked.
pub(crate) fn executor_settings(
    src: &Source<'_>,
    raw: &RawTeam,
    kind_of: &BTreeMap<AgentId, String>,
) -> Result<ExecutorSettings, FileError> {
    let http = match &raw.http {
        Some(h) => http_policy(src, h)?,
        None => HttpPolicy::default(),
    };
    let mut endpoints = BTreeMap::new();
    for (i, e) in raw.endpoints.iter().enumerate() {
        let name = e.name.get_ref();
        if let Some(first) = raw.endpoints[..i].iter().find(|o| o.name.get_ref() == name) {
            let line = src.position(first.name.span()).0;
            return Err(src.error(
                e.name.span(),
                format!(
                    "endpoint `{name}` is already defined on line {line}; endpoint names must be unique"
                ),
            ));
        }
        endpoints.insert(name.clone(), endpoint(src, i, e, &http)?);
    }
    let mut settings = ExecutorSettings { http, endpoints, ..ExecutorSettings::default() };
    if let Some(exec) = &raw.executor {
        settings.policy =
            retry_policy(src, &exec.retry(), &RetryPolicy::executor_default(), "[executor]")?;
        for (kind, fields) in &exec.kinds {
            let name = check_kind(src, kind)?;
            let base = kinds()
                .get(&name)
                .and_then(|k| k.policy())
                .unwrap_or_else(|| settings.policy.clone());
            let what = format!("[executor.kinds.{name}]");
            let policy = retry_policy(src, fields, &base, &what)?;
            settings.kind_policies.insert(name, policy);
        }
    }
    for bottom in &raw.bottom {
        let Some(fields) = &bottom.executor_retry else { continue };
        let id = AgentId::from(bottom.id.get_ref().as_str());
        let Some(kind) = kind_of.get(&id) else {
            return Err(src.error(
                first_span(fields).unwrap_or(bottom.id.span()),
                format!(
                    "`executor_retry` is the retry policy of an executor's kind runs, and `{id}` has no `kind`; give it a `kind` (one of: {}) or remove `executor_retry`",
                    known_kinds()
                ),
            ));
        };
        let base = settings.policy_for(kind, None);
        let policy = retry_policy(src, fields, &base, "`executor_retry`")?;
        settings.agent_policies.insert(id, policy);
    }
    Ok(settings)
}

/// `[http]`.
fn http_policy(src: &Source<'_>, raw: &RawHttp) -> Result<HttpPolicy, FileError> {
    let mut policy = HttpPolicy::default();
    for host in raw.allow_hosts.iter().flatten() {
        let entry = host.get_ref().trim();
        check_host(entry).map_err(|problem| {
            src.error(host.span(), format!("`allow_hosts`: `{}` {problem}", host.get_ref()))
        })?;
        if !policy.allow_hosts.iter().any(|h| h.eq_ignore_ascii_case(entry)) {
            policy.allow_hosts.push(entry.to_owned());
        }
    }
    if let Some(t) = &raw.timeout_ms {
        if *t.get_ref() == 0 {
            return Err(src.error(
                t.span(),
                "`timeout_ms` must be greater than 0 (the longest wait for one HTTP request; default 30000)",
            ));
        }
        policy.timeout_ms = *t.get_ref();
    }
    if let Some(m) = &raw.max_body_bytes {
        let bytes = usize::try_from(*m.get_ref()).ok().filter(|b| *b > 0).ok_or_else(|| {
            src.error(
                m.span(),
                "`max_body_bytes` must be at least 1 (the most bytes of an answer read; default 1048576)",
            )
        })?;
        policy.max_body_bytes = bytes;
    }
    Ok(policy)
}

/// An `allow_hosts` entry: a host name or an IP address, optionally with a port, nothing else.
fn check_host(entry: &str) -> Result<(), String> {
    const FORM: &str = "write a host, optionally with a port, such as \"docs.example.com\", \
                        \"127.0.0.1:8080\" or \"[::1]:8080\"";
    if entry.is_empty() {
        return Err(format!("is empty; {FORM}"));
    }
    if entry.contains("://") || entry.contains('/') {
        return Err(format!("is a URL, not a host; {FORM}"));
    }
    if entry.parse::<Ipv6Addr>().is_ok() {
        return Ok(());
    }
    // (the host name, if not an IPv6 address in brackets; the port, if one is written)
    let (host, port) = match entry.strip_prefix('[') {
        Some(rest) => {
            let (inside, tail) =
                rest.split_once(']').ok_or_else(|| format!("has no closing `]`; {FORM}"))?;
            if inside.parse::<Ipv6Addr>().is_err() {
                return Err(format!("has `{inside}` in brackets, not an IPv6 address; {FORM}"));
            }
            let port = match tail {
                "" => None,
                t => Some(
                    t.strip_prefix(':').ok_or_else(|| format!("has `{t}` after `]`; {FORM}"))?,
                ),
            };
            (None, port)
        }
        None => match entry.rsplit_once(':') {
            Some((host, port)) => (Some(host), Some(port)),
            None => (Some(entry), None),
        },
    };
    if let Some(host) = host {
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !valid {
            return Err(format!("is not a host name or an IP address; {FORM}"));
        }
    }
    if let Some(port) = port
        && !matches!(port.parse::<u16>(), Ok(p) if p > 0)
    {
        return Err(format!("has the port `{port}`, not a number from 1 to 65535; {FORM}"));
    }
    Ok(())
}

/// The `i`th `[[endpoints]]` table, checked against `policy` ([`Endpoint::check`]), each
/// mistake pointed at its value.
fn endpoint(
    src: &Source<'_>,
    i: usize,
    raw: &RawEndpoint,
    policy: &HttpPolicy,
) -> Result<Endpoint, FileError> {
    let name = raw.name.get_ref();
    let name_ok = !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !name_ok {
        return Err(src.error(
            raw.name.span(),
            format!(
                "endpoint name `{name}` is not valid: use 1 to 64 ASCII letters, digits, `-` and `_` (requests name the endpoint)"
            ),
        ));
    }
    let method = match &raw.method {
        None => Method::Get,
        Some(m) => {
            const ALL: [Method; 5] =
                [Method::Get, Method::Post, Method::Put, Method::Patch, Method::Delete];
            ALL.into_iter().find(|k| k.as_str().eq_ignore_ascii_case(m.get_ref())).ok_or_else(
                || {
                    src.error(
                        m.span(),
                        format!(
                            "`method` is GET, POST, PUT, PATCH or DELETE, not `{}`",
                            m.get_ref()
                        ),
                    )
                },
            )?
        }
    };
    let mut endpoint = Endpoint {
        name: name.clone(),
        method,
        url: raw.url.get_ref().trim().to_owned(),
        headers: BTreeMap::new(),
        description: raw.description.clone().unwrap_or_default(),
    };
    endpoint.check(policy).map_err(|e| src.error(raw.url.span(), e.to_string()))?;
    for (header, value) in raw.headers.iter().flatten() {
        let at = || {
            let path =
                [Seg::Key("endpoints"), Seg::Index(i), Seg::Key("headers"), Seg::Key(header)];
            src.locate(&path).unwrap_or(raw.name.span())
        };
        let value = header_value(header, value).map_err(|m| src.error(at(), m))?;
        let alone = Endpoint {
            headers: BTreeMap::from([(header.clone(), value.clone())]),
            ..endpoint.clone()
        };
        alone.check(policy).map_err(|e| src.error(at(), e.to_string()))?;
        endpoint.headers.insert(header.clone(), value);
    }
    // Everything `check` refuses is caught above with a position; this is a safety net.
    endpoint.check(policy).map_err(|e| src.error(raw.name.span(), e.to_string()))?;
    Ok(endpoint)
}

/// A header's value: a string, or `{ env = "VARIABLE" }`.
fn header_value(header: &str, value: &toml::Value) -> Result<HeaderValue, String> {
    let form = format!(
        "header `{header}` is a string (`{header} = \"application/json\"`) or names the environment variable that holds its value (`{header} = {{ env = \"API_TOKEN\" }}`)"
    );
    match value {
        toml::Value::String(s) => Ok(HeaderValue::Value(s.clone())),
        toml::Value::Table(t) => match (t.len(), t.get("env")) {
            (1, Some(toml::Value::String(var))) => {
                if valid_env_name(var) {
                    Ok(HeaderValue::Env(var.clone()))
                } else {
                    Err(format!(
                        "header `{header}`: `{var}` is not an environment variable name (letters, digits and `_`, not starting with a digit); the secret itself never goes in the team file"
                    ))
                }
            }
            _ => Err(form),
        },
        _ => Err(form),
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The span of the first field given in `raw`.
fn first_span(raw: &RawRetry) -> Option<std::ops::Range<usize>> {
    let spans = [
        raw.max_retries.as_ref().map(Spanned::span),
        raw.initial_delay_ms.as_ref().map(Spanned::span),
        raw.max_delay_ms.as_ref().map(Spanned::span),
        raw.backoff_multiplier.as_ref().map(Spanned::span),
        raw.hard_timeout_ms.as_ref().map(Spanned::span),
        raw.soft_timeout_ms.as_ref().map(Spanned::span),
    ];
    spans.into_iter().flatten().min_by_key(|s| s.start)
}

/// A retry policy: `raw`'s fields over `base`'s, checked (`what` names the table in messages).
fn retry_policy(
    src: &Source<'_>,
    raw: &RawRetry,
    base: &RetryPolicy,
    what: &str,
) -> Result<RetryPolicy, FileError> {
    let mut policy = base.clone();
    if let Some(v) = &raw.max_retries {
        policy.max_retries = *v.get_ref();
    }
    if let Some(v) = &raw.initial_delay_ms {
        policy.initial_delay_ms = *v.get_ref();
    }
    if let Some(v) = &raw.max_delay_ms {
        policy.max_delay_ms = *v.get_ref();
    }
    if let Some(v) = &raw.backoff_multiplier {
        if !v.get_ref().is_finite() || *v.get_ref() < 1.0 {
            return Err(src.error(
                v.span(),
                format!(
                    "{what}: `backoff_multiplier` must be a number of 1 or more (each retry waits this many times longer than the one before; default 2), not {}",
                    v.get_ref()
                ),
            ));
        }
        policy.backoff_multiplier = *v.get_ref();
    }
    for (value, name, slot, default) in [
        (&raw.hard_timeout_ms, "hard_timeout_ms", &mut policy.hard_timeout_ms, "300000, 5 min"),
        (&raw.soft_timeout_ms, "soft_timeout_ms", &mut policy.soft_timeout_ms, "120000, 2 min"),
    ] {
        if let Some(v) = value {
            if *v.get_ref() == 0 {
                return Err(src.error(
                    v.span(),
                    format!(
                        "{what}: `{name}` must be greater than 0 (milliseconds from the run's start, retries included; default {default})"
                    ),
                ));
            }
            *slot = *v.get_ref();
        }
    }
    // Two fields that disagree: point at the one written here (the later one if both are).
    let pick = |a: &Option<Spanned<u64>>, b: &Option<Spanned<u64>>| {
        b.as_ref().or(a.as_ref()).map_or(0..0, Spanned::span)
    };
    if policy.soft_timeout_ms > policy.hard_timeout_ms {
        return Err(src.error(
            pick(&raw.hard_timeout_ms, &raw.soft_timeout_ms),
            format!(
                "{what}: `soft_timeout_ms` ({}) is over `hard_timeout_ms` ({}); the soft timeout (a warning) comes before the hard one (the end)",
                policy.soft_timeout_ms, policy.hard_timeout_ms
            ),
        ));
    }
    if policy.initial_delay_ms > policy.max_delay_ms {
        return Err(src.error(
            pick(&raw.max_delay_ms, &raw.initial_delay_ms),
            format!(
                "{what}: `initial_delay_ms` ({}) is over `max_delay_ms` ({}), the cap of every delay; raise `max_delay_ms` or lower `initial_delay_ms`",
                policy.initial_delay_ms, policy.max_delay_ms
            ),
        ));
    }
    Ok(policy)
}
