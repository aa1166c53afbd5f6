//! OpenTelemetry for Strata: the runtime's `tracing` spans exported as OTLP traces, one trace
//! per task holding its whole delegation chain across agents and processes, and the runtime's
//! metrics, over OTLP/HTTP (protobuf) to a collector.
//!
//! The package is `strata-agent-telemetry` (`strata-agent-telemetry = "0.1"` in `Cargo.toml`); code
//! names it `agent_telemetry`.
//!
//! The runtime's crates only use `tracing`, with target [`TARGET`] (`strata::otel`). With no
//! subscriber installed (the default: `strata` without `--otlp`), those spans are disabled at
//! their callsites and cost one load and a branch each. [`Telemetry::install`] installs a
//! subscriber that enables only that target ([`OtelLayer`]), hands finished spans to the
//! SDK's batch processor (its own thread) and counts metrics read by a periodic reader.
//!
//! **Linking without propagation.** A span's ids are derived from the run's own ids
//! ([`ids`]), so every process of a run (the coordinator, each worker, a resumed run) puts
//! one task in one trace, and the receiver of a message knows the span that sent it without
//! anything added to the message:
//!
//! | field on a span | effect |
//! |---|---|
//! | `run.id` | the run (inherited by every span inside) |
//! | `strata.task` | trace id = hash(run, `task:ID`); the span's parent, unless said otherwise, is the task's span |
//! | `strata.span_key` | span id = hash(run, key): `task:ID` for the task's span, `msg:ID` for the span that sent message ID |
//! | `strata.parent_key` | parent span id = hash(run, key): a heartbeat that handles message ID is a child of `msg:ID` |
//! | `strata.links` | keys, comma-separated, of spans linked (the other messages a heartbeat handled) |
//! | `otel.name`, `otel.kind`, `otel.status_code` | the exported name, kind and status |
//!
//! Spans the runtime makes (names as exported): `strata.run`, `strata.task`,
//! `strata.heartbeat`, `strata.message`, `strata.delegation` (a task handed down, or an agent
//! spawned), `strata.decision` (proposed, signed, vetoed, with the signers), `chat MODEL`
//! (a reasoning call, OpenTelemetry GenAI conventions: `gen_ai.operation.name`,
//! `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`,
//! `gen_ai.usage.output_tokens`, and `strata.cost_usd`) and `execute_tool TOOL`. The metrics
//! are listed in [`metrics`].
//!
//! A collector that cannot be reached does not stop anything: spans that cannot be sent are
//! dropped, and the caller's `warn` is called once, at the first failure.
//!
//! ```no_run
//! use agent_telemetry::{Endpoint, Telemetry};
//!
//! let endpoint = Endpoint::parse("http://127.0.0.1:4318")?;
//! let telemetry = Telemetry::install(&endpoint, "strata", |w| eprintln!("{w}"))?;
//! {
//!     let run = tracing::info_span!(target: "strata::otel", "strata.run", run.id = "run-1");
//!     let _entered = run.enter();
//!     // ... the team runs here ...
//! }
//! telemetry.shutdown(); // sends what is left
//! # Ok::<(), agent_telemetry::TelemetryError>(())
//! ```

#[cfg(any(test, feature = "testing"))]
pub mod collector;
pub mod ids;
mod layer;
pub mod metrics;
#[cfg(feature = "testing")]
pub mod testing;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SpanData, SpanExporter, SpanProcessor};
use tracing_subscriber::layer::SubscriberExt as _;

pub use layer::{OtelLayer, TARGET};

/// The environment variable naming the collector when no endpoint is given
/// (OpenTelemetry's standard one).
pub const ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often metrics are sent.
const METRICS_INTERVAL: Duration = Duration::from_secs(5);

/// How long [`Telemetry::shutdown`] waits for the last spans and metrics to be sent.
const SHUTDOWN_PATIENCE: Duration = Duration::from_secs(5);

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The endpoint is not a URL the exporter can send to.
    #[error(
        "bad OTLP endpoint {url:?}: {reason} (give the collector's OTLP/HTTP base URL, such as http://127.0.0.1:4318)"
    )]
    BadEndpoint {
        /// The endpoint as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The exporter could not be built.
    #[error("cannot set up the OTLP exporter: {0}")]
    Exporter(String),
    /// A `tracing` subscriber was installed already in this process.
    #[error("a tracing subscriber is installed already in this process")]
    AlreadyInstalled,
}

/// A collector's OTLP/HTTP base URL: spans go to `/v1/traces` under it, metrics to
/// `/v1/metrics`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    base: String,
}

impl Endpoint {
    /// Checks `url`: `http://HOST[:PORT][/PATH]`. (`https` is refused: the exporter is built
    /// without TLS; put a collector agent on the local host.)
    pub fn parse(url: &str) -> Result<Self, TelemetryError> {
        let bad = |reason| TelemetryError::BadEndpoint { url: url.to_owned(), reason };
        let trimmed = url.trim();
        let rest = if let Some(rest) = trimmed.strip_prefix("http://") {
            rest
        } else if trimmed.starts_with("https://") {
            return Err(bad(
                "https is not supported: the exporter has no TLS; send to a collector over http",
            ));
        } else {
            return Err(bad("it must start with http://"));
        };
        let host = rest.split(['/', '?', '#']).next().unwrap_or("");
        if host.is_empty() || host.starts_with(':') {
            return Err(bad("it names no host"));
        }
        if let Some((_, port)) = host.rsplit_once(':')
            && !host.ends_with(']')
            && port.parse::<u16>().is_err()
        {
            return Err(bad("its port is not a number from 0 to 65535"));
        }
        if trimmed.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it contains spaces or control characters"));
        }
        Ok(Self { base: trimmed.trim_end_matches('/').to_owned() })
    }

    /// The endpoint `flag` names, else the one in [`ENDPOINT_ENV`], else none (telemetry
    /// off). An empty value counts as none.
    pub fn from_flag_or_env(flag: Option<&str>) -> Result<Option<Self>, TelemetryError> {
        let env = std::env::var(ENDPOINT_ENV).ok();
        match flag.or(env.as_deref()).map(str::trim).filter(|s| !s.is_empty()) {
            Some(url) => Self::parse(url).map(Some),
            None => Ok(None),
        }
    }

    /// The base URL.
    pub fn as_str(&self) -> &str {
        &self.base
    }

    fn signal(&self, path: &str) -> String {
        format!("{}/v1/{path}", self.base)
    }
}

/// Calls `warn` the first time an export fails, and never again.
struct WarnOnce {
    warned: AtomicBool,
    endpoint: String,
    warn: Box<dyn Fn(String) + Send + Sync>,
}

impl WarnOnce {
    fn failed(&self, what: &str, error: &dyn std::fmt::Display) {
        if !self.warned.swap(true, Ordering::SeqCst) {
            (self.warn)(format!(
                "warning: cannot send {what} to the OTLP collector at {}: {error} (the run goes on; telemetry that cannot be sent is dropped, and this is said once)",
                self.endpoint
            ));
        }
    }
}

impl std::fmt::Debug for WarnOnce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarnOnce").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Spans<E> {
    inner: E,
    warn: Arc<WarnOnce>,
}

impl<E: SpanExporter> SpanExporter for Spans<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let result = self.inner.export(batch).await;
        if let Err(e) = &result {
            self.warn.failed("spans", e);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[derive(Debug)]
struct Metrics<E> {
    inner: E,
    warn: Arc<WarnOnce>,
}

impl<E: PushMetricExporter> PushMetricExporter for Metrics<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if let Err(e) = &result {
            self.warn.failed("metrics", e);
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// Telemetry installed for this process: keep it, and [`shutdown`](Self::shutdown) it
/// before the process ends so that the last spans and metrics are sent.
pub struct Telemetry {
    spans: Arc<BatchSpanProcessor>,
    meters: SdkMeterProvider,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

/// The variable naming the service, over any other source (the OpenTelemetry specification).
pub const SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";

/// The variable holding the resource's attributes (the OpenTelemetry specification).
pub const RESOURCE_ATTRIBUTES_ENV: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// The process's resource, as the OpenTelemetry specification has it: the SDK's own attributes
/// and those of `attributes_env` (`OTEL_RESOURCE_ATTRIBUTES`, see [`resource_attributes`]);
/// `service.name` from `service_name_env` (`OTEL_SERVICE_NAME`) when it is set and not empty,
/// else the one `OTEL_RESOURCE_ATTRIBUTES` gives, else `service`; `service.version` the
/// crate's unless `OTEL_RESOURCE_ATTRIBUTES` gives one. Attributes that do not parse are
/// left out, all of them, with the reason (the specification's rule).
fn resource(
    service: &str,
    service_name_env: Option<String>,
    attributes_env: Option<String>,
) -> (Resource, Option<String>) {
    use opentelemetry::KeyValue;
    use opentelemetry_sdk::resource::TelemetryResourceDetector;
    let (attributes, problem) = match attributes_env.as_deref().map(resource_attributes) {
        None => (Vec::new(), None),
        Some(Ok(attributes)) => (attributes, None),
        Some(Err(problem)) => {
            (Vec::new(), Some(format!("{RESOURCE_ATTRIBUTES_ENV} is left out: {problem}")))
        }
    };
    let given = |key: &str| attributes.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
    let name = service_name_env
        .filter(|s| !s.trim().is_empty())
        .or_else(|| given("service.name"))
        .unwrap_or_else(|| service.to_owned());
    let version = given("service.version").unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned());
    let resource = Resource::builder_empty()
        .with_detector(Box::new(TelemetryResourceDetector))
        .with_attributes(attributes.into_iter().map(|(k, v)| KeyValue::new(k, v)))
        .with_attributes([KeyValue::new("service.version", version)])
        .with_service_name(name)
        .build();
    (resource, problem)
}

/// The attributes of `OTEL_RESOURCE_ATTRIBUTES`: `key=value` pairs separated by commas, each
/// key and value percent-decoded and trimmed; an empty entry is skipped. A pair without `=`,
/// an empty key or a bad percent-encoding is an error naming it.
pub fn resource_attributes(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for entry in text.split(',') {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = entry.split_once('=') else {
            return Err(format!("`{}` is not a key=value pair", entry.trim()));
        };
        let key = percent_decoded(key.trim())?;
        if key.is_empty() {
            return Err(format!("`{}` has no key", entry.trim()));
        }
        out.push((key, percent_decoded(value.trim())?));
    }
    Ok(out)
}

/// `text` with each `%XY` replaced by the byte it encodes; the bytes must be UTF-8.
fn percent_decoded(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let byte = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(byte) = byte else {
                return Err(format!("`{text}` has a `%` that is not followed by two hex digits"));
            };
            out.push(byte);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` does not decode to UTF-8"))
}

impl Telemetry {
    /// Exports this process's spans and metrics to `endpoint`, as service `service` unless the
    /// environment names another (`OTEL_SERVICE_NAME`, else `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`, whose other attributes the resource carries too); `warn` is
    /// called once if an export fails. Installs the process's global `tracing` subscriber.
    pub fn install(
        endpoint: &Endpoint,
        service: &'static str,
        warn: impl Fn(String) + Send + Sync + 'static,
    ) -> Result<Self, TelemetryError> {
        let warn = Arc::new(WarnOnce {
            warned: AtomicBool::new(false),
            endpoint: endpoint.as_str().to_owned(),
            warn: Box::new(warn),
        });
        let (resource, problem) = resource(
            service,
            std::env::var(SERVICE_NAME_ENV).ok(),
            std::env::var(RESOURCE_ATTRIBUTES_ENV).ok(),
        );
        if let Some(problem) = problem {
            (warn.warn)(format!("warning: {problem}"));
        }
        let build_error =
            |e: opentelemetry_otlp::ExporterBuildError| TelemetryError::Exporter(e.to_string());
        let span_exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint.signal("traces"))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(build_error)?;
        let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(endpoint.signal("metrics"))
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(build_error)?;
        let mut processor =
            BatchSpanProcessor::builder(Spans { inner: span_exporter, warn: warn.clone() }).build();
        processor.set_resource(&resource);
        let spans = Arc::new(processor);
        let reader = PeriodicReader::builder(Metrics { inner: metric_exporter, warn })
            .with_interval(METRICS_INTERVAL)
            .build();
        let meters =
            SdkMeterProvider::builder().with_resource(resource).with_reader(reader).build();
        let instruments = metrics::Instruments::new(&meters.meter("strata"));
        let layer = OtelLayer::new(spans.clone(), Some(instruments));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|_| TelemetryError::AlreadyInstalled)?;
        Ok(Self { spans, meters })
    }

    /// Sends what is left (waiting at most a few seconds) and stops the export threads.
    /// Spans that end after this are dropped.
    pub fn shutdown(self) {
        let Self { spans, meters } = self;
        // The HTTP client is a blocking one: it is flushed and dropped on a thread of its own,
        // never on an async runtime's thread.
        let worker = std::thread::spawn(move || {
            let _ = spans.force_flush();
            let _ = spans.shutdown_with_timeout(SHUTDOWN_PATIENCE);
            let _ = meters.force_flush();
            let _ = meters.shutdown_with_timeout(SHUTDOWN_PATIENCE);
            drop(spans);
            drop(meters);
        });
        let _ = worker.join();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use opentelemetry::Key;

    use super::*;

    fn text(resource: &Resource, key: &str) -> Option<String> {
        resource.get(&Key::new(key.to_owned())).map(|v| v.as_str().into_owned())
    }

    #[test]
    fn resource_attributes_are_pairs_percent_decoded_and_a_bad_one_is_named() {
        assert_eq!(
            resource_attributes(" team = a%20b ,, region=eu%2Cwest,empty=").unwrap(),
            [
                ("team".to_owned(), "a b".to_owned()),
                ("region".to_owned(), "eu,west".to_owned()),
                ("empty".to_owned(), String::new()),
            ]
        );
        assert_eq!(resource_attributes("team").unwrap_err(), "`team` is not a key=value pair");
        assert_eq!(resource_attributes("=x").unwrap_err(), "`=x` has no key");
        assert!(resource_attributes("a=%zz").unwrap_err().contains("two hex digits"));
        assert!(resource_attributes("a=%ff").unwrap_err().contains("UTF-8"));
    }

    #[test]
    fn the_service_is_named_by_otel_service_name_then_the_attributes_then_the_default() {
        let attributes = Some("service.name=from-attributes,service.version=9,team=a".to_owned());
        let (r, problem) = resource("strata", Some("checkout".into()), attributes.clone());
        assert_eq!(problem, None);
        assert_eq!(text(&r, "service.name").as_deref(), Some("checkout"));
        assert_eq!(text(&r, "service.version").as_deref(), Some("9"));
        assert_eq!(text(&r, "team").as_deref(), Some("a"));
        assert_eq!(text(&r, "telemetry.sdk.language").as_deref(), Some("rust"));
        let (r, _) = resource("strata", Some("  ".into()), attributes);
        assert_eq!(text(&r, "service.name").as_deref(), Some("from-attributes"));
        let (r, _) = resource("strata", None, None);
        assert_eq!(text(&r, "service.name").as_deref(), Some("strata"));
        assert_eq!(text(&r, "service.version").as_deref(), Some(env!("CARGO_PKG_VERSION")));
        // Attributes that do not parse are left out, all of them, and said.
        let (r, problem) = resource("strata", None, Some("team=a,oops".into()));
        assert_eq!(text(&r, "team"), None);
        assert_eq!(text(&r, "service.name").as_deref(), Some("strata"));
        assert!(problem.unwrap().contains("`oops` is not a key=value pair"));
    }
}
